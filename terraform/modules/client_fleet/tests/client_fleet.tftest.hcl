# Offline: `terraform test` with a mocked AWS provider checks the module's logic.
mock_provider "aws" {}

variables {
  lab_id             = "t-cli"
  broker             = "nats"
  ami_id             = "ami-0123456789abcdef0"
  broker_ips         = ["10.42.0.10", "10.42.0.11", "10.42.0.12"]
  subnet_ids         = ["subnet-a"]
  security_group_ids = ["sg-1"]
  key_name           = "t-cli-key"
  expires_at         = "2030-01-01T00:00:00Z"
}

run "senders_and_receivers_have_their_own_counts" {
  command = apply

  variables {
    sender_count   = 4
    receiver_count = 2
    instance_type  = "c5.xlarge"
  }

  assert {
    condition     = length(output.senders) == 4 && length(output.receivers) == 2 && length(aws_instance.client) == 6
    error_message = "Sender and receiver counts are independent."
  }
  assert {
    condition     = join(",", [for s in output.senders : s.index]) == "0,1,2,3"
    error_message = "Senders are listed in index order."
  }
  assert {
    condition     = alltrue([for k, i in aws_instance.client : i.instance_type == "c5.xlarge" && i.metadata_options[0].http_tokens == "required"])
    error_message = "Clients use their own instance type and require IMDSv2."
  }
  assert {
    condition = alltrue([for k, i in aws_instance.client :
      i.tags["mqlab:role"] == split("-", k)[0] && i.tags["mqlab:lab"] == "t-cli" && i.tags["mqlab:broker"] == "nats" &&
      i.tags["Project"] == "mqlab" && i.tags["mqlab:expires-at"] == "2030-01-01T00:00:00Z" && i.root_block_device[0].tags["mqlab:role"] == split("-", k)[0]
    ])
    error_message = "Every client carries project, lab, broker, role and expiry tags."
  }
  assert {
    condition     = strcontains(local.user_data["receiver-1"], "\"brokers\":[\"10.42.0.10\",\"10.42.0.11\",\"10.42.0.12\"]") && strcontains(local.user_data["receiver-1"], "\"role\":\"receiver\"")
    error_message = "Clients learn their role and the brokers' private IPs from user data."
  }
}

run "no_clients" {
  command = apply

  variables {
    sender_count   = 0
    receiver_count = 0
  }

  assert {
    condition     = length(aws_instance.client) == 0 && length(output.senders) == 0
    error_message = "Zero clients is allowed (brokers only)."
  }
}

run "refuses_negative_senders" {
  command = plan
  variables {
    sender_count = -1
  }
  expect_failures = [var.sender_count]
}

run "refuses_bad_instance_type" {
  command = plan
  variables {
    instance_type = "R5 2XL"
  }
  expect_failures = [var.instance_type]
}

run "refuses_bad_ami_id" {
  command = plan
  variables {
    ami_id = "my-image"
  }
  expect_failures = [var.ami_id]
}
