"""maxnorm_jax.parallel."""
