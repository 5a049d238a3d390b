package policy

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
)

// The policy's view of each workload kind, for ValidateWorkload: the caller adds the namespace's
// labels and PDBs.

// DeploymentWorkload is the WorkloadInput of a Deployment.
func DeploymentWorkload(d *appsv1.Deployment) WorkloadInput {
	return WorkloadInput{Kind: KindDeployment, Namespace: d.Namespace, Name: d.Name, Labels: d.Labels,
		Selector: d.Spec.Selector, Replicas: d.Spec.Replicas, Template: d.Spec.Template}
}

// StatefulSetWorkload is the WorkloadInput of a StatefulSet.
func StatefulSetWorkload(s *appsv1.StatefulSet) WorkloadInput {
	return WorkloadInput{Kind: KindStatefulSet, Namespace: s.Namespace, Name: s.Name, Labels: s.Labels,
		Selector: s.Spec.Selector, Replicas: s.Spec.Replicas, Template: s.Spec.Template}
}

// JobWorkload is the WorkloadInput of a Job; its parallelism stands for replicas.
func JobWorkload(j *batchv1.Job) WorkloadInput {
	return WorkloadInput{Kind: KindJob, Namespace: j.Namespace, Name: j.Name, Labels: j.Labels,
		Selector: j.Spec.Selector, Replicas: j.Spec.Parallelism, Template: j.Spec.Template}
}

// CronJobWorkload is the WorkloadInput of a CronJob, from its Job template.
func CronJobWorkload(c *batchv1.CronJob) WorkloadInput {
	job := c.Spec.JobTemplate.Spec
	return WorkloadInput{Kind: KindCronJob, Namespace: c.Namespace, Name: c.Name, Labels: c.Labels,
		Selector: job.Selector, Replicas: job.Parallelism, Template: job.Template}
}
