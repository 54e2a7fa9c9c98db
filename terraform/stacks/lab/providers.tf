locals {
  emulated = var.aws_endpoint != ""
}

# Credentials come from the standard AWS chain (environment, shared config, SSO,
# instance profile); nothing here names them.
provider "aws" {
  region = var.region

  # Set only when a test points mqlab at an EC2 emulator (MQLAB_AWS_ENDPOINT).
  skip_credentials_validation = local.emulated
  skip_requesting_account_id  = local.emulated
  skip_metadata_api_check     = local.emulated

  endpoints {
    ec2 = local.emulated ? var.aws_endpoint : null
    sts = local.emulated ? var.aws_endpoint : null
  }

  default_tags {
    tags = local.common_tags
  }
}
