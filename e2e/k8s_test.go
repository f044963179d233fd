package e2e_test

import (
	"maps"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"example.com/shop/contracts"
	"example.com/shop/platform/consumerapp"
	"example.com/shop/platform/outbox"
)

// manifests is deploy/k8s rendered and decoded.
type manifests struct {
	deployments     []appsv1.Deployment
	services        []corev1.Service
	configMaps      map[string]corev1.ConfigMap
	secret          corev1.Secret
	jobs            []batchv1.Job
	cronJobs        []batchv1.CronJob
	pdbs            []policyv1.PodDisruptionBudget
	networkPolicies []networkingv1.NetworkPolicy
	serviceMonitors []monitoringv1.ServiceMonitor
	rules           []monitoringv1.PrometheusRule
	infra           map[string][]byte // "<kind> <name>" -> YAML of a resource in shop-infra (deploy/k8s-ha)
}

// render builds deploy/k8s with kustomize (the library behind `kubectl apply -k`, on
// the local files only) and decodes every resource strictly into its Go API type: an
// unknown field, a wrong type or an unknown kind fails the test.
func render(t *testing.T) manifests {
	t.Helper()
	return renderDir(t, "deploy/k8s")
}

// renderDir is render of dir, a kustomization relative to the repository. The
// resources of the shop-infra namespace (deploy/k8s-ha's clusters) are kept as YAML
// in infra, for the caller to decode.
func renderDir(t *testing.T, dir string) manifests {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../"+dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m := manifests{configMaps: map[string]corev1.ConfigMap{}, infra: map[string][]byte{}}
	for _, r := range resources.Resources() {
		raw, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetNamespace() == "shop-infra" {
			m.infra[r.GetKind()+" "+r.GetName()] = raw
			continue
		}
		if r.GetNamespace() != "shop" && r.GetKind() != "Namespace" {
			t.Errorf("%s %s is in namespace %q, want shop", r.GetKind(), r.GetName(), r.GetNamespace())
		}
		decode := func(into any) {
			if err := yaml.UnmarshalStrict(raw, into); err != nil {
				t.Errorf("%s %s: %v", r.GetKind(), r.GetName(), err)
			}
		}
		switch r.GetKind() {
		case "Namespace":
			decode(&corev1.Namespace{})
		case "Deployment":
			var d appsv1.Deployment
			decode(&d)
			m.deployments = append(m.deployments, d)
		case "Service":
			var s corev1.Service
			decode(&s)
			m.services = append(m.services, s)
		case "ConfigMap":
			var c corev1.ConfigMap
			decode(&c)
			m.configMaps[c.Name] = c
		case "Secret":
			decode(&m.secret)
		case "Job":
			var j batchv1.Job
			decode(&j)
			m.jobs = append(m.jobs, j)
		case "CronJob":
			var c batchv1.CronJob
			decode(&c)
			m.cronJobs = append(m.cronJobs, c)
		case "PodDisruptionBudget":
			var p policyv1.PodDisruptionBudget
			decode(&p)
			m.pdbs = append(m.pdbs, p)
		case "NetworkPolicy":
			var n networkingv1.NetworkPolicy
			decode(&n)
			m.networkPolicies = append(m.networkPolicies, n)
		case "ServiceMonitor":
			var s monitoringv1.ServiceMonitor
			decode(&s)
			m.serviceMonitors = append(m.serviceMonitors, s)
		case "PrometheusRule":
			var p monitoringv1.PrometheusRule
			decode(&p)
			m.rules = append(m.rules, p)
		default:
			t.Errorf("unexpected kind %s (%s)", r.GetKind(), r.GetName())
		}
	}
	return m
}

// pod is one pod template of deploy/k8s: its owner ("Deployment order", "Job
// migrate-orders", "CronJob purge-inbox-stock"), its labels and its spec.
type pod struct {
	owner  string
	labels map[string]string
	spec   corev1.PodSpec
}

// pods returns the pod templates of every Deployment, Job and CronJob.
func (m manifests) pods() []pod {
	var out []pod
	for _, d := range m.deployments {
		out = append(out, pod{"Deployment " + d.Name, d.Spec.Template.Labels, d.Spec.Template.Spec})
	}
	for _, j := range m.jobs {
		out = append(out, pod{"Job " + j.Name, j.Spec.Template.Labels, j.Spec.Template.Spec})
	}
	for _, c := range m.cronJobs {
		out = append(out, pod{"CronJob " + c.Name, c.Spec.JobTemplate.Spec.Template.Labels, c.Spec.JobTemplate.Spec.Template.Spec})
	}
	return out
}

// urls returns the connection URLs container c gets from the Secret, by variable.
func (m manifests) urls(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out[e.Name] = m.secret.StringData[e.ValueFrom.SecretKeyRef.Key]
		}
	}
	return out
}

// config returns the variables container c gets from its ConfigMaps.
func (m manifests) config(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef != nil {
			maps.Copy(out, m.configMaps[from.ConfigMapRef.Name].Data)
		}
	}
	return out
}

// selects reports whether sel, which must select something, matches podLabels.
func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	if sel == nil || len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return s.Matches(labels.Set(podLabels))
}

// allows reports whether a NetworkPolicy that selects podLabels lets its pods reach
// TCP port in namespace ns (egress), or, with ns empty, be reached on it (ingress).
func (m manifests) allows(t *testing.T, podLabels map[string]string, ns string, port int) bool {
	t.Helper()
	hasPort := func(ports []networkingv1.NetworkPolicyPort) bool {
		return len(ports) == 0 || slices.ContainsFunc(ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && p.Port.IntValue() == port && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP)
		})
	}
	for _, np := range m.networkPolicies {
		if !selects(t, &np.Spec.PodSelector, podLabels) {
			continue
		}
		if ns == "" {
			if slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool { return hasPort(r.Ports) }) {
				return true
			}
			continue
		}
		for _, r := range np.Spec.Egress {
			if hasPort(r.Ports) && (len(r.To) == 0 || slices.ContainsFunc(r.To, func(p networkingv1.NetworkPolicyPeer) bool {
				return p.NamespaceSelector != nil && p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == ns
			})) {
				return true
			}
		}
	}
	return false
}

// TestKubernetesManifests renders deploy/k8s and checks what a cluster operator
// expects: every pod non-root with a read-only root file system, no privilege
// escalation and resource requests and limits; every long-running process with
// start-up, readiness and liveness probes, a Service, a PodDisruptionBudget and a
// scrape; behind a default deny, NetworkPolicies that let each pod reach the servers
// of its URLs and be reached on its port; the relays directly on PostgreSQL (their
// session lock) and declaring no consumer's queue; CronJobs whose horizons are no
// shorter than the replay windows; and the PrometheusRule equal to
// deploy/prometheus/alerts.yaml.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	m := render(t)

	// A serve and a migrate per service, a relay and a purge-outbox per producer, a
	// purge-inbox per consumer (TestKubernetesFollowsTheRegistry names them).
	services, producers, consumers := len(contracts.Services()), len(contracts.Producers()), len(contracts.Consumers())
	if len(m.deployments) != services+producers || len(m.jobs) != services || len(m.cronJobs) != producers+consumers {
		t.Fatalf("%d deployments, %d jobs, %d cron jobs; want %d, %d, %d", len(m.deployments), len(m.jobs), len(m.cronJobs),
			services+producers, services, producers+consumers)
	}
	defaultDeny := slices.ContainsFunc(m.networkPolicies, func(np networkingv1.NetworkPolicy) bool {
		sel := np.Spec.PodSelector
		return len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 && len(np.Spec.Ingress)+len(np.Spec.Egress) == 0 && len(np.Spec.PolicyTypes) == 2
	})
	if !defaultDeny {
		t.Error("no default-deny NetworkPolicy")
	}
	for _, p := range m.pods() {
		sc := p.spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("%s: pod must run as a non-root user", p.owner)
		}
		if p.spec.AutomountServiceAccountToken == nil || *p.spec.AutomountServiceAccountToken {
			t.Errorf("%s: mounts a service account token it does not need", p.owner)
		}
		for _, c := range p.spec.Containers {
			csc := c.SecurityContext
			if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
				csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
				csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
				t.Errorf("%s/%s: want a read-only root file system, no privilege escalation, all capabilities dropped", p.owner, c.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: want CPU and memory requests and a memory limit", p.owner, c.Name)
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					if _, ok := m.secret.StringData[e.ValueFrom.SecretKeyRef.Key]; !ok {
						t.Errorf("%s: %s names secret key %s, which shop-urls lacks", p.owner, e.Name, e.ValueFrom.SecretKeyRef.Key)
					}
				}
			}
			for _, from := range c.EnvFrom {
				if from.ConfigMapRef == nil {
					continue
				}
				if _, ok := m.configMaps[from.ConfigMapRef.Name]; !ok {
					t.Errorf("%s: takes its settings from ConfigMap %s, which deploy/k8s lacks", p.owner, from.ConfigMapRef.Name)
				}
			}
			// Each server its URLs name is reachable through the NetworkPolicies.
			for env, raw := range m.urls(c) {
				u, err := url.Parse(raw)
				if err != nil {
					t.Errorf("%s: %s: %v", p.owner, env, err)
					continue
				}
				host := strings.Split(u.Hostname(), ".") // <service>.<namespace>.svc
				port, _ := strconv.Atoi(u.Port())
				if len(host) < 3 || host[2] != "svc" || port == 0 {
					t.Errorf("%s: %s = %s, want a Service's host and port", p.owner, env, raw)
				} else if !m.allows(t, p.labels, host[1], port) {
					t.Errorf("%s: no NetworkPolicy lets it reach %s (%s)", p.owner, u.Host, env)
				}
			}
			if !strings.HasSuffix(command(c.Command), " relay") {
				continue
			}
			for env, raw := range m.urls(c) {
				if strings.HasSuffix(env, "_DATABASE_URL") && (strings.Contains(raw, "pgbouncer") || !strings.Contains(raw, ":5432/")) {
					t.Errorf("%s: %s = %s must reach PostgreSQL directly: the relay's leader lock and LISTEN need a session", p.owner, env, raw)
				}
			}
			if v := m.config(c)["RELAY_DECLARE_QUEUES"]; v != "false" {
				t.Errorf("%s: RELAY_DECLARE_QUEUES = %q, want false (its broker user may not read the consumers' queues)", p.owner, v)
			}
		}
	}

	// Every long-running process: probes, a Service, a disruption budget, a scrape,
	// and its port open to the Service's clients.
	for _, d := range m.deployments {
		tmpl := d.Spec.Template
		if len(tmpl.Spec.Containers) != 1 {
			t.Errorf("Deployment %s has %d containers, want 1", d.Name, len(tmpl.Spec.Containers))
			continue
		}
		c := tmpl.Spec.Containers[0]
		i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" })
		if i < 0 {
			t.Errorf("Deployment %s has no port named http", d.Name)
			continue
		}
		port := int(c.Ports[i].ContainerPort)
		for name, probe := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Port.String() != "http" {
				t.Errorf("Deployment %s: no %s probe on its http port", d.Name, name)
			}
		}
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("Deployment %s: readiness probe on %s, want /readyz", d.Name, c.ReadinessProbe.HTTPGet.Path)
		}
		if !slices.ContainsFunc(m.services, func(s corev1.Service) bool {
			return selects(t, &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, tmpl.Labels) &&
				slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" && p.TargetPort.String() == "http" })
		}) {
			t.Errorf("Deployment %s has no Service with a port http", d.Name)
		}
		if !slices.ContainsFunc(m.pdbs, func(p policyv1.PodDisruptionBudget) bool {
			return selects(t, p.Spec.Selector, tmpl.Labels) && p.Spec.MinAvailable != nil
		}) {
			t.Errorf("Deployment %s has no PodDisruptionBudget", d.Name)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("Deployment %s runs fewer than two replicas: a drain or a crash stops it", d.Name)
		}
		if tmpl.Labels["app.kubernetes.io/name"] != d.Name || tmpl.Annotations["prometheus.io/scrape"] != "true" ||
			tmpl.Annotations["prometheus.io/port"] != strconv.Itoa(port) {
			t.Errorf("Deployment %s: no name label, or no scrape annotation of port %d", d.Name, port)
		}
		if len(m.serviceMonitors) != 1 || !slices.Contains(m.serviceMonitors[0].Spec.Selector.MatchExpressions[0].Values, d.Name) {
			t.Errorf("Deployment %s is not selected by the ServiceMonitor", d.Name)
		}
		if !m.allows(t, tmpl.Labels, "", port) {
			t.Errorf("Deployment %s: no NetworkPolicy lets anything reach its port %d, not even Prometheus", d.Name, port)
		}
	}

	// Purges, with horizons no shorter than what may still come back.
	least := map[string]time.Duration{
		"purge-outbox": outbox.DefaultReplayHorizon,
		"purge-inbox":  outbox.DefaultReplayHorizon + consumerapp.DefaultMinRetention,
	}
	for _, c := range m.cronJobs {
		cmd := c.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Command
		if len(cmd) != 4 || least[cmd[1]] == 0 || cmd[2] != "--older-than" {
			t.Errorf("CronJob %s runs %v", c.Name, cmd)
			continue
		}
		if h, err := time.ParseDuration(cmd[3]); err != nil || h < least[cmd[1]] {
			t.Errorf("CronJob %s horizon %s, want at least %s", c.Name, cmd[3], least[cmd[1]])
		}
		if c.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
			t.Errorf("CronJob %s may overlap itself", c.Name)
		}
	}

	// The PrometheusRule carries exactly deploy/prometheus/alerts.yaml.
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	if len(m.rules) != 1 || !reflect.DeepEqual(m.rules[0].Spec, file) {
		t.Error("deploy/k8s/prometheusrule.yaml and deploy/prometheus/alerts.yaml differ; change both")
	}
}

// cnpgCluster and rabbitmqCluster mirror the fields deploy/k8s-ha sets of
// CloudNativePG's Cluster (postgresql.cnpg.io/v1, api/v1/cluster_types.go) and the
// RabbitMQ Cluster Operator's RabbitmqCluster (rabbitmq.com/v1beta1,
// api/v1beta1/rabbitmqcluster_types.go), named as there: a strict decode then fails
// on a field the manifest misspells, without the operators' Go modules.
type cnpgCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Instances int `json:"instances"`
		Storage   struct {
			Size string `json:"size"`
		} `json:"storage"`
		PostgreSQL struct {
			Synchronous struct {
				Method         string `json:"method"`
				Number         int    `json:"number"`
				DataDurability string `json:"dataDurability"`
			} `json:"synchronous"`
		} `json:"postgresql"`
	} `json:"spec"`
}

type rabbitmqCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Replicas int `json:"replicas"`
		Rabbitmq struct {
			AdditionalConfig string `json:"additionalConfig"`
		} `json:"rabbitmq"`
	} `json:"spec"`
}

// TestKubernetesHA renders deploy/k8s-ha: all of deploy/k8s, plus a CloudNativePG
// Cluster of three instances with one synchronous standby and a RabbitmqCluster of
// three nodes under a disruption budget, in the namespace the NetworkPolicies let the
// processes reach; every database URL on the Cluster's read-write Service and every
// broker URL on the RabbitmqCluster's Service, as the role or user of deploy/k8s.
func TestKubernetesHA(t *testing.T) {
	t.Parallel()
	base, ha := render(t), renderDir(t, "deploy/k8s-ha")
	if len(ha.deployments) != len(base.deployments) || len(ha.jobs) != len(base.jobs) || len(ha.cronJobs) != len(base.cronJobs) {
		t.Errorf("deploy/k8s-ha has %d deployments, %d jobs, %d cron jobs; deploy/k8s %d, %d, %d", len(ha.deployments),
			len(ha.jobs), len(ha.cronJobs), len(base.deployments), len(base.jobs), len(base.cronJobs))
	}
	decode := func(kind string, into any) {
		var found []string
		for key, raw := range ha.infra {
			if strings.HasPrefix(key, kind+" ") {
				found = append(found, key)
				if err := yaml.UnmarshalStrict(raw, into); err != nil {
					t.Errorf("%s: %v", key, err)
				}
			}
		}
		if len(found) != 1 {
			t.Fatalf("deploy/k8s-ha has %v in shop-infra, want one %s", found, kind)
		}
	}
	var pg cnpgCluster
	var mq rabbitmqCluster
	var pdb policyv1.PodDisruptionBudget
	decode("Cluster", &pg)
	decode("RabbitmqCluster", &mq)
	decode("PodDisruptionBudget", &pdb)

	sync := pg.Spec.PostgreSQL.Synchronous
	if pg.APIVersion != "postgresql.cnpg.io/v1" || pg.Spec.Instances != 3 ||
		sync.Method != "any" || sync.Number != 1 || sync.DataDurability != "required" {
		t.Errorf("Cluster %s: %s, %d instances, synchronous %+v; want postgresql.cnpg.io/v1, 3, {any 1 required}",
			pg.Name, pg.APIVersion, pg.Spec.Instances, sync)
	}
	if mq.APIVersion != "rabbitmq.com/v1beta1" || mq.Spec.Replicas != 3 ||
		!strings.Contains(mq.Spec.Rabbitmq.AdditionalConfig, "quorum_queue.continuous_membership_reconciliation.target_group_size = 3") {
		t.Errorf("RabbitmqCluster %s: %s, %d replicas, config %q; want rabbitmq.com/v1beta1, 3, queues grown to 3 members",
			mq.Name, mq.APIVersion, mq.Spec.Replicas, mq.Spec.Rabbitmq.AdditionalConfig)
	}
	// The operator labels its pods app.kubernetes.io/name=<cluster name>.
	if pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != mq.Name ||
		pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %s does not keep all but one of RabbitmqCluster %s's pods", pdb.Name, mq.Name)
	}
	reached := map[string]bool{}
	for _, np := range ha.networkPolicies {
		for _, e := range np.Spec.Egress {
			for _, to := range e.To {
				if to.NamespaceSelector != nil {
					reached[to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]] = true
				}
			}
		}
	}
	if !reached[pg.Namespace] || !reached[mq.Namespace] {
		t.Errorf("no NetworkPolicy lets a process reach namespace %s or %s", pg.Namespace, mq.Namespace)
	}

	hosts := map[string]string{
		"_DATABASE_URL": pg.Name + "-rw." + pg.Namespace + ".svc:5432",
		"_AMQP_URL":     mq.Name + "." + mq.Namespace + ".svc:5672",
	}
	for key, v := range ha.secret.StringData {
		was, ok := base.secret.StringData[key]
		if !ok {
			t.Errorf("deploy/k8s-ha adds secret key %s, which deploy/k8s does not have", key)
			continue
		}
		old, err := url.Parse(was)
		if err != nil {
			t.Fatal(err)
		}
		for suffix, host := range hosts {
			if !strings.HasSuffix(key, suffix) {
				continue
			}
			for _, raw := range strings.Split(v, ",") {
				u, err := url.Parse(raw)
				if err != nil || u.Host != host || u.User.Username() != old.User.Username() {
					t.Errorf("secret %s = %q, want %s as %s", key, raw, host, old.User.Username())
				}
			}
		}
	}
	if ha.secret.Labels["app.kubernetes.io/component"] != "urls" {
		t.Error("deploy/k8s-ha's Secret lacks the label app.kubernetes.io/component=urls that its README's first rollout selects")
	}
	if len(ha.secret.StringData) != len(base.secret.StringData) {
		t.Errorf("deploy/k8s-ha's secret has %d keys, deploy/k8s's %d", len(ha.secret.StringData), len(base.secret.StringData))
	}
}
