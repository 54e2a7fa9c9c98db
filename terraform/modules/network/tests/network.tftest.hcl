# Offline: `terraform test` with a mocked AWS provider checks the module's logic.
mock_provider "aws" {
  override_data {
    target = data.aws_availability_zones.available
    values = { names = ["eu-west-1a", "eu-west-1b", "eu-west-1c"] }
  }
}

variables {
  lab_id        = "t-net"
  operator_cidr = "203.0.113.7/32"
  tags          = { "mqlab:expires-at" = "2030-01-01T00:00:00Z" }
}

run "one_zone_by_default" {
  command = apply

  assert {
    condition     = length(aws_subnet.lab) == 1 && join(",", output.availability_zones) == "eu-west-1a"
    error_message = "Default must be one subnet in one availability zone."
  }
  assert {
    condition     = length(aws_placement_group.lab) == 0 && output.placement_group == null
    error_message = "No placement group unless asked for."
  }
  assert {
    condition     = alltrue([for r in aws_security_group.ssh.ingress : join(",", r.cidr_blocks) == "203.0.113.7/32" && r.from_port == 22 && r.to_port == 22])
    error_message = "SSH must be open to the operator's CIDR only."
  }
  assert {
    condition     = alltrue([for r in aws_security_group.internal.ingress : join(",", r.cidr_blocks) == "10.42.0.0/16"])
    error_message = "Broker and client ports must be open inside the VPC only."
  }
  assert {
    condition     = aws_vpc.lab.tags["mqlab:lab"] == "t-net" && aws_vpc.lab.tags["Project"] == "mqlab" && aws_subnet.lab[0].tags["mqlab:expires-at"] == "2030-01-01T00:00:00Z"
    error_message = "Network resources must carry project, lab and expiry tags."
  }
  assert {
    condition     = length(output.security_group_ids) == 2
    error_message = "Nodes join two security groups (ssh, internal)."
  }
}

run "multi_az_and_placement_group" {
  command = apply

  variables {
    availability_zones = 3
    placement_group    = true
  }

  assert {
    condition     = length(aws_subnet.lab) == 3 && join(",", output.availability_zones) == "eu-west-1a,eu-west-1b,eu-west-1c"
    error_message = "One subnet per requested availability zone."
  }
  assert {
    condition     = length(distinct(output.subnet_cidrs)) == 3
    error_message = "Subnets must not overlap."
  }
  assert {
    condition     = aws_placement_group.lab[0].strategy == "cluster" && output.placement_group == "t-net-cluster"
    error_message = "placement_group = true creates one cluster placement group."
  }
}

run "explicit_zone_names" {
  command = plan

  variables {
    availability_zone_names = ["us-east-1d"]
  }

  assert {
    condition     = aws_subnet.lab[0].availability_zone == "us-east-1d" && length(data.aws_availability_zones.available) == 0
    error_message = "Explicit zone names are used without a lookup."
  }
}

run "refuses_ssh_open_to_the_world" {
  command = plan

  variables {
    operator_cidr = "0.0.0.0/0"
  }

  expect_failures = [var.operator_cidr]
}

run "refuses_malformed_operator_cidr" {
  command = plan

  variables {
    operator_cidr = "my-laptop"
  }

  expect_failures = [var.operator_cidr]
}

run "refuses_zero_zones" {
  command = plan

  variables {
    availability_zones = 0
  }

  expect_failures = [var.availability_zones]
}

run "refuses_bad_lab_id" {
  command = plan

  variables {
    lab_id = "Bad_Lab"
  }

  expect_failures = [var.lab_id]
}
