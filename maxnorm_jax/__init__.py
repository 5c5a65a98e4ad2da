"""maxnorm_jax: RL with verifiable rewards in JAX, centred on the advantage-scale interface."""

__version__ = "0.1.0"
