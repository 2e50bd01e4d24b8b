"""The operator surface: Grafana dashboards, their rendering and provisioning, chart schema.

``panels`` defines what an operator sees (pure data); ``grafana`` turns it into dashboard
JSON; ``render`` draws it from a Prometheus server with matplotlib; ``provision`` pushes it
to Grafana; ``chart_schema`` writes the Helm chart's ``values.schema.json``.
"""
