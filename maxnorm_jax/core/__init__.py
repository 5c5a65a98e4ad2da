"""maxnorm_jax.core: the mathematics of the seeds, pure JAX, no I/O.

from maxnorm_jax.core import advantages, protocol, losses, diagnostics
"""

from maxnorm_jax.core import advantages, diagnostics, losses, protocol
from maxnorm_jax.core.cards import AdvantageCard

__all__ = ["AdvantageCard", "advantages", "diagnostics", "losses", "protocol"]
