terraform {
  required_version = "~> 1.11"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "5.100.0"
    }
  }

  # One state per lab: mqlab passes -backend-config=path=<lab dir>/terraform.tfstate.
  # For the S3 option mqlab writes a backend_override.tf next to this file.
  backend "local" {}
}
