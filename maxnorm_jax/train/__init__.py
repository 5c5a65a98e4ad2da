"""maxnorm_jax.train."""
