"""maxnorm_jax.models."""
