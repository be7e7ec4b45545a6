"""What the operator configures: flags with SE_EXPORTER_* twins, the exporter's options, strict configuration files."""
