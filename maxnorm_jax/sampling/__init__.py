"""maxnorm_jax.sampling."""
