"""Descriptions of the Helm chart's values, by key path (``a.b``; ``a[].b`` for the items
of a list): ``chart_schema.py`` puts them into ``values.schema.json`` and the chart's
README is generated from that schema (``chart_readme.py``). A test fails on a chart key
without one.
"""

from __future__ import annotations

DESCRIPTIONS: dict[str, str] = {
    "global": (
        "Helm's global values of a parent chart (unused here; allowed so the chart works as a"
        " subchart)."
    ),
    "image": "The Ray image of every pod.",
    "image.repository": "Image with nightjar-ray installed (k8s/Dockerfile).",
    "image.tag": 'Image tag ("": the chart\'s appVersion).',
    "image.pullPolicy": "Image pull policy.",
    "imagePullSecrets": "Pull secrets of every pod (`[{name: ...}]`).",
    "rayVersion": "Ray version inside the image (KubeRay needs it).",
    "serveConfig": (
        "A Ray Serve config (the schema of deploy/*.yaml), rendered into serveConfigV2; each "
        "application's `args.nightjar` block is checked against NightjarConfig "
        "(docs/serve.md), with `pooling.actor_node: head`."
    ),
    "upgradeStrategy": "KubeRay's upgrade strategy for serveConfigV2 and cluster changes.",
    "hfToken": "Hugging Face token for gated models (env HUGGING_FACE_HUB_TOKEN).",
    "hfToken.secretName": 'Secret holding the token ("": none).',
    "hfToken.secretKey": "Key of the token in that Secret.",
    "auth": "Client authentication of the OpenAI endpoint.",
    "auth.apiKeySecret": (
        "Secret whose value becomes NIGHTJAR_API_KEY in every Ray container: the OpenAI "
        "endpoint then requires `Authorization: Bearer <key>` (probes and metrics need none)."
    ),
    "auth.apiKeySecret.name": 'Secret holding the API key ("": no key, anyone can call).',
    "auth.apiKeySecret.key": "Key of the API key in that Secret.",
    "env": "Extra environment of every Ray container (`[{name, value}]`).",
    "sharedMemorySize": "Size of /dev/shm (emptyDir, medium Memory) for vLLM's workers.",
    "serviceAccount": "ServiceAccount of the head and worker pods.",
    "serviceAccount.create": "Create a ServiceAccount for the Ray pods.",
    "serviceAccount.name": (
        'Its name ("" with create: the release\'s full name; "" without: the namespace default).'
    ),
    "serviceAccount.annotations": (
        "Annotations of the created ServiceAccount (e.g. IRSA or GKE workload identity for an"
        " object-store snapshot)."
    ),
    "podAnnotations": "Annotations of every Ray pod (a group's podAnnotations add to them).",
    "nodeSelector": "Node labels every Ray pod must match (a group's own value replaces it).",
    "affinity": ("Affinity of every Ray pod (a group's own value replaces it)."),
    "tolerations": "Tolerations of every Ray pod (a group's own value replaces it).",
    "priorityClassName": "PriorityClass of every Ray pod (a group's own value replaces it).",
    "podSecurityContext": "Pod securityContext of every Ray pod (a group's own value replaces it).",
    "securityContext": (
        "Ray container's securityContext in every Ray pod (a group's own value replaces it)."
    ),
    "extraVolumes": "Extra volumes of every Ray pod (Kubernetes volumes).",
    "extraVolumeMounts": (
        "Extra volume mounts of every Ray container (e.g. a measured switch-cost profile)."
    ),
    "head": (
        "The head pod: Serve controller, proxy and the policy actor (no replicas with num-cpus 0)."
    ),
    "head.rayStartParams": "`ray start` parameters of the head.",
    "head.resources": "CPU and memory of the head pod (Kubernetes resources).",
    "head.resources.requests": "Requests.",
    "head.resources.limits": "Limits.",
    "head.podAnnotations": "Annotations of the head pod (added to podAnnotations).",
    "head.nodeSelector": (
        "Node labels the head pod must match (replaces the top-level value when set)."
    ),
    "head.affinity": ("Affinity of the head pod (replaces the top-level value when set)."),
    "head.tolerations": "Tolerations of the head pod (replaces the top-level value when set).",
    "head.priorityClassName": (
        "PriorityClass of the head pod (replaces the top-level value when set)."
    ),
    "head.podSecurityContext": (
        "Pod securityContext of the head pod (replaces the top-level value when set)."
    ),
    "head.securityContext": (
        "Ray container's securityContext in the head pod (replaces the top-level value when set)."
    ),
    "workerGroups": "GPU worker groups (where the replicas run).",
    "workerGroups[].name": "Group name (KubeRay's groupName).",
    "workerGroups[].replicas": "Pods at install.",
    "workerGroups[].minReplicas": "Fewest pods the autoscaler keeps.",
    "workerGroups[].maxReplicas": "Most pods the autoscaler adds.",
    "workerGroups[].gpusPerPod": "GPUs per pod: tensor_parallel_size of one replica.",
    "workerGroups[].rayStartParams": "Extra `ray start` parameters (num-gpus is gpusPerPod).",
    "workerGroups[].resources": ("CPU and memory of a worker pod (its GPUs come from gpusPerPod)."),
    "workerGroups[].resources.requests": "Requests.",
    "workerGroups[].resources.limits": "Limits.",
    "workerGroups[].podAnnotations": "Annotations of this group's pods (added to podAnnotations).",
    "workerGroups[].nodeSelector": (
        "Node labels this group's pods must match (replaces the top-level value when set)."
    ),
    "workerGroups[].affinity": (
        "Affinity of this group's pods (replaces the top-level value when set)."
    ),
    "workerGroups[].tolerations": (
        "Tolerations of this group's pods (replaces the top-level value when set)."
    ),
    "workerGroups[].priorityClassName": (
        "PriorityClass of this group's pods (replaces the top-level value when set)."
    ),
    "workerGroups[].podSecurityContext": (
        "Pod securityContext of this group's pods (replaces the top-level value when set)."
    ),
    "workerGroups[].securityContext": (
        "Ray container's securityContext in this group's pods (replaces the top-level value "
        "when set)."
    ),
    "autoscaling": "Ray autoscaling of the worker groups.",
    "autoscaling.enabled": (
        "Ray's in-tree autoscaler adds worker pods when Serve autoscaling asks for replicas."
    ),
    "autoscaling.idleTimeoutSeconds": "Seconds an idle worker pod stays.",
    "modelCache": (
        "A PersistentVolumeClaim for model weights, so a new worker pod does not download "
        "them again (ReadWriteMany when worker pods run on several nodes)."
    ),
    "modelCache.enabled": "Mount a model cache volume on the worker pods.",
    "modelCache.mountPath": (
        "Where it is mounted; HF_HOME is set to it (Hugging Face and vLLM download the "
        "weights there)."
    ),
    "modelCache.existingClaim": (
        "Name of an existing PersistentVolumeClaim for the model cache (the chart then "
        "creates none)."
    ),
    "modelCache.size": "Size of the claim the chart creates.",
    "modelCache.storageClass": (
        'StorageClass of the claim the chart creates ("": the cluster default).'
    ),
    "modelCache.accessModes": "Access modes of the claim the chart creates.",
    "policyPool": (
        "Volume of the policy actor's snapshot on the head pod; not needed when "
        "`nightjar.pooling.snapshot_dir` is an s3:// or gs:// URI."
    ),
    "policyPool.mountPath": (
        "Where the head pod mounts the snapshot volume; a local "
        "`nightjar.pooling.snapshot_dir` must lie under it."
    ),
    "policyPool.volume": (
        "The volume when persistence is off (a Kubernetes volume source; emptyDir: lost with "
        "the pod)."
    ),
    "policyPool.persistence": (
        "A claim for the snapshot (mounted on the head only, where the policy actor runs: "
        "ReadWriteOnce is enough)."
    ),
    "policyPool.persistence.enabled": "Keep the snapshot on a PersistentVolumeClaim.",
    "policyPool.persistence.existingClaim": (
        "Name of an existing PersistentVolumeClaim for the snapshot (the chart then creates none)."
    ),
    "policyPool.persistence.size": "Size of the claim the chart creates.",
    "policyPool.persistence.storageClass": (
        'StorageClass of the claim the chart creates ("": the cluster default).'
    ),
    "policyPool.persistence.accessModes": "Access modes of the claim the chart creates.",
    "monitoring": "Prometheus Operator objects and Grafana dashboards.",
    "monitoring.podMonitor": (
        "PodMonitors for port `metrics` (8080) of the head and worker pods (KubeRay's style)."
    ),
    "monitoring.podMonitor.enabled": "Install PodMonitors (Prometheus Operator).",
    "monitoring.podMonitor.labels": "Labels your Prometheus selects PodMonitors by.",
    "monitoring.podMonitor.interval": "Scrape interval.",
    "monitoring.prometheusRule": "Alert rules (docs/operations.md, Alerts) and their thresholds.",
    "monitoring.prometheusRule.enabled": "Install the PrometheusRule.",
    "monitoring.prometheusRule.labels": "Labels your Prometheus selects rules by.",
    "monitoring.prometheusRule.policySyncStaleSeconds": (
        "NightjarPolicySyncStale: seconds without a pooling exchange."
    ),
    "monitoring.prometheusRule.draftThrashEvents15m": (
        "NightjarDraftThrashing: offload + reload events per replica in 15 minutes."
    ),
    "monitoring.prometheusRule.kvFreeLowFraction": (
        "NightjarKVFreeBelowTauLow: free KV blocks under this fraction of all blocks."
    ),
    "monitoring.prometheusRule.speculatingStepShare": (
        "NightjarQueueGrowingWhileSpeculating: share of steps with gamma > 0."
    ),
    "monitoring.prometheusRule.runbookBaseUrl": (
        "Base URL of docs/runbooks.md; each alert's runbook_url is it + '#' + the alert name."
    ),
    "monitoring.prometheusRule.scopeToReleaseNamespace": (
        "true: every rule selects this release's namespace only (two releases never alert "
        "on each other's series); false: one rule set for all namespaces."
    ),
    "monitoring.prometheusRule.metricsAbsentMinutes": (
        "NightjarMetricsAbsent: minutes a serving replica exports no nightjar_* series."
    ),
    "monitoring.dashboards": "Grafana dashboards as ConfigMaps.",
    "monitoring.dashboards.enabled": "Install the dashboard ConfigMaps.",
    "monitoring.dashboards.labels": "Labels Grafana's dashboard sidecar selects.",
    "monitoring.dashboards.annotations": "Annotations of the ConfigMaps (e.g. a sidecar folder).",
}
