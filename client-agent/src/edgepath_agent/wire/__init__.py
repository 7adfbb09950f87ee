"""Generated from proto/edgepath/v1 by proto/generate.py. Do not edit."""
