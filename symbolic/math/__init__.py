"""math."""
