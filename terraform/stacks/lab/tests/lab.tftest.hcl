# Offline: the root stack composed from mocked AWS resources; checks the inventory shape.
mock_provider "aws" {
  mock_data "aws_ami" {
    defaults = { id = "ami-0fedcba9876543210" }
  }
  mock_data "aws_availability_zones" {
    defaults = { names = ["eu-west-1a", "eu-west-1b"] }
  }
}

variables {
  lab_id         = "t-lab"
  broker         = "nats"
  operator_cidr  = "198.51.100.0/24"
  expires_at     = "2030-01-01T08:00:00Z"
  ssh_public_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE2pmOI8MYyrdtFHDVqgB6fzHgGWXyKbdu3GGCcnjMTq mqlab"
  sender_count   = 2
  receiver_count = 1
}

run "inventory_shape" {
  command = apply

  assert {
    condition = (
      output.inventory.format_version == 1 && output.inventory.region == "eu-west-1" &&
      output.inventory.ssh_user == "root" && output.inventory.lab_id == "t-lab" &&
      output.inventory.broker == "nats" && output.inventory.expires_at == "2030-01-01T08:00:00Z"
    )
    error_message = "The inventory names region, ssh user, lab, broker and expiry."
  }
  assert {
    condition     = length(output.inventory.brokers) == 3 && length(output.inventory.senders) == 2 && length(output.inventory.receivers) == 1
    error_message = "3 brokers, 2 senders and 1 receiver are listed."
  }
  assert {
    condition = alltrue([for i, b in output.inventory.brokers :
      b.index == i && b.private_ip == cidrhost("10.42.0.0/20", 10 + i) && can(b.public_ip) && can(b.instance_id)
    ])
    error_message = "Each broker entry has its index, private IP, public IP and instance id."
  }
  assert {
    condition     = alltrue([for s in concat(output.inventory.senders, output.inventory.receivers) : can(s.private_ip) && can(s.public_ip) && can(s.index)])
    error_message = "Each client entry has its index and both IPs."
  }
  assert {
    condition     = aws_key_pair.lab.key_name == "t-lab-key" && aws_key_pair.lab.tags["mqlab:lab"] == "t-lab" && aws_key_pair.lab.tags["Project"] == "mqlab"
    error_message = "The lab's key pair is named and tagged after the lab."
  }
  assert {
    condition     = local.emulated == false
    error_message = "Without aws_endpoint the provider talks to real AWS."
  }
}

run "emulator_endpoint_is_an_option" {
  command = plan

  variables {
    aws_endpoint = "http://127.0.0.1:5000"
  }

  assert {
    condition     = local.emulated
    error_message = "aws_endpoint switches the provider to the emulator."
  }
}

run "refuses_world_open_ssh" {
  command = plan
  variables {
    operator_cidr = "0.0.0.0/0"
  }
  expect_failures = [var.operator_cidr]
}

run "refuses_zero_brokers" {
  command = plan
  variables {
    broker_count = 0
  }
  expect_failures = [var.broker_count]
}

run "refuses_bad_instance_type" {
  command = plan
  variables {
    broker_instance_type = "r5"
  }
  expect_failures = [var.broker_instance_type]
}

run "refuses_non_ed25519_key" {
  command = plan
  variables {
    ssh_public_key = "ssh-rsa AAAAB3Nza mqlab"
  }
  expect_failures = [var.ssh_public_key]
}

run "refuses_bad_region" {
  command = plan
  variables {
    region = "Europe"
  }
  expect_failures = [var.region]
}
