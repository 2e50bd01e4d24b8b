"""Open-loop load generator for the OpenAI endpoint (``nightjar-ray loadgen``).

``arrivals`` (when requests arrive: Poisson, gamma, step, ramp), ``trace`` (replay of a
timestamped production trace, scaled to the machine), ``workload`` (what each request
asks for), ``client`` (async streaming dispatch and per-request records), ``summary``
(the metrics ``vllm bench serve`` reports, under the same names) and ``plots``.
"""
