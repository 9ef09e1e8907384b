"""Side probes: short, purpose-built measurements beside (or instead of) a load run.

The abandoned-stream probe (``abandon``), cold start (``coldstart``), drain on stop
(``drain``), a hot model swap done by servecheck (``swap``) or watched under load
(``swap_probe``), greedy-output agreement before a cutover (``agreement``), and the one TCP
connect that says whether anything is listening (``reach``).
"""
