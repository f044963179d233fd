package main

// composeRelays returns the compose services of a producer's relays: "<name>-relay", which
// publishes its port on the host, and "<name>-relay-2", which stands by while the first
// leads (docker-compose.yml, docker-compose.ha.yml, deploy/prometheus/prometheus.yml).
func composeRelays(s Service) []string {
	if !s.Producer {
		return nil
	}
	return []string{s.Name + "-relay", s.Name + "-relay-2"}
}
