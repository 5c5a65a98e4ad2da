"""maxnorm_jax.rewards."""
