"""maxnorm_jax.data."""
