"""measured."""
