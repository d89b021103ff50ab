"""networks."""
