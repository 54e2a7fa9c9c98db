# Offline: `terraform test` with a mocked AWS provider checks the module's logic.
mock_provider "aws" {
  mock_data "aws_ami" {
    defaults = { id = "ami-0fedcba9876543210" }
  }
}

variables {
  lab_id             = "t-brk"
  broker             = "nats"
  subnet_ids         = ["subnet-a", "subnet-b"]
  subnet_cidrs       = ["10.42.0.0/20", "10.42.16.0/20"]
  security_group_ids = ["sg-1", "sg-2"]
  key_name           = "t-brk-key"
  expires_at         = "2030-01-01T00:00:00Z"
}

run "three_tagged_brokers_from_the_tagged_ami" {
  command = apply

  assert {
    condition     = length(aws_instance.broker) == 3 && length(output.nodes) == 3
    error_message = "Default is 3 broker nodes."
  }
  assert {
    condition     = alltrue([for i in aws_instance.broker : i.instance_type == "r5.2xlarge" && i.ami == "ami-0fedcba9876543210"])
    error_message = "Brokers are r5.2xlarge from the AMI found by tags."
  }
  assert {
    condition     = length(data.aws_ami.broker) == 1 && length([for f in data.aws_ami.broker[0].filter : f if f.name == "tag:mqlab:broker" && contains(f.values, "nats")]) == 1
    error_message = "The AMI is looked up by its mqlab:broker tag."
  }
  assert {
    condition = alltrue([for idx, i in aws_instance.broker :
      i.tags["mqlab:role"] == "broker" && i.tags["mqlab:lab"] == "t-brk" && i.tags["mqlab:broker"] == "nats" &&
      i.tags["Project"] == "mqlab" && i.tags["mqlab:expires-at"] == "2030-01-01T00:00:00Z" && i.tags["mqlab:index"] == tostring(idx)
    ])
    error_message = "Every broker carries project, lab, broker, role, index and expiry tags."
  }
  assert {
    condition     = alltrue([for i in aws_instance.broker : i.metadata_options[0].http_tokens == "required"])
    error_message = "IMDSv2 must be required."
  }
  assert {
    condition     = alltrue([for i in aws_instance.broker : i.root_block_device[0].volume_type == "gp3" && i.root_block_device[0].volume_size == 100 && i.root_block_device[0].tags["mqlab:role"] == "broker"])
    error_message = "Default storage is 100 GiB gp3, tagged."
  }
  assert {
    condition     = join(",", output.private_ips) == "10.42.0.10,10.42.16.11,10.42.0.12"
    error_message = "Nodes alternate subnets and get fixed private IPs known before boot."
  }
  assert {
    condition     = aws_instance.broker[1].subnet_id == "subnet-b" && aws_instance.broker[2].subnet_id == "subnet-a"
    error_message = "Nodes are spread round robin over the subnets."
  }
}

run "user_data_names_index_and_peers" {
  command = plan

  variables {
    subnet_ids   = ["subnet-a"]
    subnet_cidrs = ["10.42.0.0/20"]
  }

  assert {
    condition = strcontains(local.user_data[1], jsonencode({
      broker         = "nats"
      format_version = 1
      index          = 1
      lab_id         = "t-brk"
      node_count     = 3
      peers          = ["10.42.0.10", "10.42.0.11", "10.42.0.12"]
      private_ip     = "10.42.0.11"
      role           = "broker"
    }))
    error_message = "User data tells each node its index and its peers' private IPs."
  }
}

run "given_ami_gp2_and_placement_group" {
  command = apply

  variables {
    node_count      = 5
    ami_id          = "ami-0123456789abcdef0"
    ebs_type        = "gp2"
    ebs_size_gb     = 500
    instance_type   = "i3en.large"
    placement_group = "t-brk-cluster"
  }

  assert {
    condition     = length(aws_instance.broker) == 5 && length(data.aws_ami.broker) == 0
    error_message = "A given AMI skips the lookup."
  }
  assert {
    condition     = alltrue([for i in aws_instance.broker : i.ami == "ami-0123456789abcdef0" && i.root_block_device[0].volume_type == "gp2" && i.root_block_device[0].volume_size == 500 && i.placement_group == "t-brk-cluster" && i.instance_type == "i3en.large"])
    error_message = "AMI, EBS type/size, instance type and placement group are applied."
  }
}

run "flake_rev_narrows_the_lookup" {
  command = plan

  variables {
    flake_rev = "0123abcd"
  }

  assert {
    condition     = length([for f in data.aws_ami.broker[0].filter : f if f.name == "tag:mqlab:flake-rev" && contains(f.values, "0123abcd")]) == 1
    error_message = "flake_rev adds a mqlab:flake-rev tag filter."
  }
}

run "refuses_zero_brokers" {
  command = plan
  variables {
    node_count = 0
  }
  expect_failures = [var.node_count]
}

run "refuses_bad_instance_type" {
  command = plan
  variables {
    instance_type = "huge"
  }
  expect_failures = [var.instance_type]
}

run "refuses_unknown_ebs_type" {
  command = plan
  variables {
    ebs_type = "ssd"
  }
  expect_failures = [var.ebs_type]
}

run "refuses_bad_expiry" {
  command = plan
  variables {
    expires_at = "tomorrow"
  }
  expect_failures = [var.expires_at]
}
