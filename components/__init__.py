"""inferstack: one typed stack spec -> a whole GPU inference platform on AWS EKS, with Pulumi."""
