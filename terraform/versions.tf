terraform {
  # terraform_data (1.4) plus strcontains/endswith (1.5). No providers at all: everything here
  # is built in, so `terraform init` needs no registry (our machines and air-gapped users have none).
  required_version = ">= 1.5"

  # The state holds the agents' API tokens. Iris passes the path at init
  # (-backend-config=path=<IRIS_DATA_DIR>/terraform/terraform.tfstate) so it stays out of the
  # checkout; see docs/docker.md.
  backend "local" {}
}
