terraform {
  # Built-in resources only (terraform_data + local-exec driving the docker CLI): no provider to
  # download, so `terraform init` works without a registry.
  required_version = ">= 1.5"
}
