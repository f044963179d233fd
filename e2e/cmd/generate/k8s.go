package main

// purgeJob is one CronJob of deploy/k8s/cronjobs.yaml: the command it runs of S's
// binary (purge-outbox or purge-inbox), under the name "<command>-<service>", with its
// --older-than horizon, on its schedule.
type purgeJob struct {
	S                                Service
	Name, Command, Horizon, Schedule string
}

// newPurgeJob is the template function purge.
func newPurgeJob(s Service, command, horizon, schedule string) purgeJob {
	return purgeJob{S: s, Name: command + "-" + s.Name, Command: command, Horizon: horizon, Schedule: schedule}
}
