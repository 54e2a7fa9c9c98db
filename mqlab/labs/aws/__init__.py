"""Terraform-driven lab environments on AWS (see terraform/). Importing the package
registers the AWS scenario checks (:mod:`mqlab.labs.aws.validate`)."""

from mqlab.labs.aws import validate as validate
