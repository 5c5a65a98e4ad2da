"""maxnorm_jax.lab: small simulators and theory checks of the seeds' claims, in seconds on a CPU.

bandit    tabular-softmax contextual bandit (jitter, credible small-gap and binary prompts)
methods   the method rows (registry estimator, Protocol on or off)
simulate  jitted learning runs with the core's estimators, Protocol, losses and diagnostics
table     seed 000's Table 3 and the learning claims from the traces
arcsine   seed 004's arcsine limit and the implied transform of every estimator
plots     PNG figures
run       run(workdir): the whole lab, printed and written into workdir
"""
