output "runtime_image" {
  description = "The runtime image agents run, and the revision of the sources it was built from (null while enable_docker_agents is false)."
  value = {
    image    = local.runtime_image
    revision = local.runtime_image_revision
  }
}
