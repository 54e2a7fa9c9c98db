"""Terraform-driven lab environments on AWS (see terraform/)."""
