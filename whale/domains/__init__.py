"""Built-in domains and the registry that finds them by name."""
