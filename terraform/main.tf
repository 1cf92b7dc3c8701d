locals {
  repo_dir = var.repo_dir != "" ? abspath(var.repo_dir) : abspath("${path.root}/..")

  # What goes into the image (the same files .dockerignore lets through). Bytecode caches and
  # egg-info are left out: they change without the sources changing and would force rebuilds.
  image_sources = sort([
    for f in setunion(
      fileset(local.repo_dir, "iris_runtime/**"),
      fileset(local.repo_dir, "plugins/**"),
      fileset(local.repo_dir, "build/wheelhouse/*"),
      fileset(local.repo_dir, "{Dockerfile,.dockerignore,setup.cfg,pyproject.toml}"),
    ) : f
    if !strcontains(f, "__pycache__") && !strcontains(f, ".egg-info/") && !endswith(f, ".pyc")
    && !strcontains(f, "/tests/") && !strcontains(f, "/.")
  ])
  image_revision = sha256(join("\n", concat(
    [var.image, var.base_image],
    [for f in local.image_sources : "${f} ${filesha256("${local.repo_dir}/${f}")}"],
  )))
}

# The runtime image, built once for every agent (not per agent module). Its triggers are the
# content of what goes into it, so an apply with unchanged sources builds nothing.
resource "terraform_data" "iris_runtime_image" {
  count = var.enable_docker_agents ? 1 : 0

  triggers_replace = {
    revision = local.image_revision
  }
  input = local.image_revision

  provisioner "local-exec" {
    # Values come from the environment so paths with spaces or quotes need no shell quoting.
    command = "docker build --network host --tag \"$IRIS_IMAGE\" --build-arg BASE_IMAGE=\"$IRIS_BASE_IMAGE\" --label iris.revision=\"$IRIS_REVISION\" --file \"$IRIS_REPO_DIR/Dockerfile\" \"$IRIS_REPO_DIR\""
    environment = {
      IRIS_IMAGE      = var.image
      IRIS_BASE_IMAGE = var.base_image
      IRIS_REVISION   = local.image_revision
      IRIS_REPO_DIR   = local.repo_dir
    }
  }
}

locals {
  # What every agent block in agents.tf passes to its module. The revision changes when the
  # image is rebuilt, which replaces an agent's container on the next apply that includes it:
  # spawn applies only the new agent (-target), a full apply rolls all (docs/docker.md).
  runtime_image          = var.image
  runtime_image_revision = one(terraform_data.iris_runtime_image[*].output)
}
