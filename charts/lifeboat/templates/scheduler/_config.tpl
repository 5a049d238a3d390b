{{/*
KubeSchedulerConfiguration of lifeboat-scheduler, the data of the ConfigMap in config.yaml.
manifests/scheduler/config.yaml is rendered from it, and test/integration/scheduler starts the
built binary with that exact file, so keep it deployable as is.
*/}}
{{- define "lifeboat.schedulerConfig" -}}
# KubeSchedulerConfiguration of lifeboat-scheduler (rendered from charts/lifeboat).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  # kube-scheduler's defaults (50/100) cap binds at ~50 Pods/s; evicted Pods arrive in bursts
  # (a whole capacity pool at once).
  qps: {{ .Values.scheduler.kubeAPIQPS }}
  burst: {{ .Values.scheduler.kubeAPIBurst }}
leaderElection:
  leaderElect: true
  resourceLock: leases
  # Our own lease: sharing kube-system/kube-scheduler would make the default scheduler and this
  # one take turns (kubernetes-sigs/scheduler-plugins#801).
  resourceName: lifeboat-scheduler
  resourceNamespace: {{ .Release.Namespace }}
# Evicted Pods wait for a lifeboat node to turn active; with the default 10 s maximum back-off
# a Pod that just failed would wait up to 10 s after the node is ready. Retries stay
# event-driven (queueing hints), so a short back-off costs little.
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
profiles:
- schedulerName: {{ .Values.scheduler.name }}
  # No percentageOfNodesToScore: kube-scheduler's adaptive node sampling applies. A sample of
  # a large cluster would often miss the few active lifeboat nodes, but protected Pods do not
  # depend on it: LifeboatPlacement's PreFilter narrows their cycle to the active lifeboat
  # nodes that can take them; when none can, the cycle spans all nodes as usual. Scoring every
  # node (percentageOfNodesToScore: 100) cost 2.5x throughput at 1000 nodes
  # (docs/benchmarks/scheduler.md).
  plugins:
    multiPoint:
      enabled:
      - name: LifeboatTaints
        weight: 3 # TaintToleration's weight, which it replaces
      - name: LifeboatPlacement
        # More than the sum of every other score plugin's weight (default score plugins 12 +
        # LifeboatTaints 3 + CapacityPoolSpread 5 = 20): an active lifeboat node wins over any
        # preference, e.g. the tiers' preferred Spot affinity.
        weight: 25
      - name: CapacityPoolSpread
        weight: 5
      disabled:
      - name: TaintToleration
    # Enabled here as well so that it runs before DefaultPreemption: when a cycle narrowed to
    # lifeboat nodes finds none feasible, it retries the Pod on all nodes instead of letting
    # preemption evict Pods from lifeboat nodes.
    postFilter:
      enabled:
      - name: LifeboatPlacement
  pluginConfig:
  - name: LifeboatTaints
    args:
      protectedPodTaintKeys: [lifeboat.dev/lifeboat]
      reservedTaintKeys: [lifeboat.dev/lifeboat, lifeboat.dev/standby]
  - name: LifeboatPlacement
    args:
      interruptionTaintKeys: [karpenter.sh/disrupted, lifeboat.dev/interrupted]
      reclaimedPoolWait: {{ .Values.scheduler.reclaimedPoolWait }}
      seatReleaseWait: {{ .Values.scheduler.seatReleaseWait }}
  - name: CapacityPoolSpread
    args:
      hotPoolPenalty: {{ .Values.scheduler.hotPoolPenalty }}
      hotPoolHalfLife: {{ .Values.scheduler.hotPoolHalfLife }}
      telemetryNamespace: {{ .Release.Namespace }}
      telemetryConfigMapName: lifeboat-pool-telemetry
{{- end }}
