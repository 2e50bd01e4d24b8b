"""Open-loop load generator for the OpenAI endpoint (``nightjar-ray loadgen``).

``workload`` (what each request asks for: synthetic, or a production trace scaled to the
machine), ``client`` (the streaming client and open-loop dispatch), ``summary`` (the
metrics ``vllm bench serve`` reports, under the same names) and ``plots``; the runs built
on them: ``bench``, ``stats`` and ``report`` (``bench-serve``), ``soak``, ``chaos``. The
request, record, trace and arrival types are :mod:`nightjar_ray.workload`'s.
"""
