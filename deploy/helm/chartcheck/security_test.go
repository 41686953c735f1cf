package chartcheck

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// workload is one role's pod template in a render.
type workload struct {
	role   string // metad, bookie, broker
	source string
	pod    corev1.PodSpec
}

func workloads(objs []rendered) []workload {
	var ws []workload
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *appsv1.StatefulSet:
			ws = append(ws, workload{v.Spec.Template.Labels["app.kubernetes.io/component"], o.source, v.Spec.Template.Spec})
		case *appsv1.Deployment:
			ws = append(ws, workload{v.Spec.Template.Labels["app.kubernetes.io/component"], o.source, v.Spec.Template.Spec})
		}
	}
	return ws
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// tlsEnv are the settings that make a node serve mutual TLS on every
// listener and its admin port over https behind the token.
var tlsEnv = []string{"STRATA_TLS_CERT_FILE", "STRATA_TLS_KEY_FILE", "STRATA_TLS_CA_FILE", "STRATA_ADMIN_TLS", "STRATA_ADMIN_TOKEN_FILE"}

// TestDefaultRenderIsSecure: with the default values every role serves
// TLS with its own certificate, issued by an init container that alone
// mounts the CA; nothing runs with --insecure; probes speak https; the
// Job that makes the CA and admin Secrets runs first with rights to those
// Secrets only; the helm test and the ServiceMonitor use credentials.
func TestDefaultRenderIsSecure(t *testing.T) {
	bin := helmBinary(t)
	for _, vf := range []string{"", "testdata/values-tiering.yaml"} {
		objs := render(t, bin, vf)
		ws := workloads(objs)
		if len(ws) != 3 {
			t.Fatalf("%s: %d workloads, want 3", vf, len(ws))
		}
		for _, w := range ws {
			checkSecureWorkload(t, w)
		}
		checkCertificateJob(t, objs)
		for _, o := range objs {
			switch v := o.obj.(type) {
			case *corev1.Pod: // helm test
				env := envOf(v.Spec.Containers[0])
				if env["STRATA_TLS_CERT"] == "" || !slices.ContainsFunc(v.Spec.Volumes, func(vol corev1.Volume) bool {
					return vol.Secret != nil && vol.Secret.SecretName == "rel-strata-admin"
				}) {
					t.Errorf("%s: the helm test has no admin certificate: env %v", o.source, env)
				}
			case *serviceMonitor:
				for _, ep := range v.Spec.Endpoints {
					if ep.Scheme != "https" || ep.BearerTokenSecret == nil || ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil {
						t.Errorf("%s: endpoint %s scrapes without https, the CA or the token", o.source, ep.Port)
					}
				}
			}
		}
	}
}

func checkSecureWorkload(t *testing.T, w workload) {
	t.Helper()
	if w.pod.AutomountServiceAccountToken == nil || *w.pod.AutomountServiceAccountToken {
		t.Errorf("%s: pods get a service account token they never use", w.source)
	}
	if len(w.pod.InitContainers) != 1 || w.pod.InitContainers[0].Name != "certificate" {
		t.Fatalf("%s: no init container issuing the pod's certificate", w.source)
	}
	init := w.pod.InitContainers[0]
	if !slices.ContainsFunc(init.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "ca" }) {
		t.Errorf("%s: the certificate init container does not mount the CA", w.source)
	}
	for _, c := range w.pod.Containers {
		env := envOf(c)
		for _, k := range tlsEnv {
			if env[k] == "" {
				t.Errorf("%s: container %s: %s unset", w.source, c.Name, k)
			}
		}
		if env["STRATA_ADMIN_TLS"] != "true" {
			t.Errorf("%s: container %s: STRATA_ADMIN_TLS=%q", w.source, c.Name, env["STRATA_ADMIN_TLS"])
		}
		if _, ok := env["STRATA_INSECURE"]; ok || slices.Contains(c.Command, "--insecure") || slices.Contains(c.Args, "--insecure") {
			t.Errorf("%s: container %s runs with --insecure", w.source, c.Name)
		}
		if c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS || c.LivenessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s: container %s: probes over plain http to an https admin port", w.source, c.Name)
		}
		// The node's process never sees the CA's key.
		if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "ca" }) {
			t.Errorf("%s: container %s mounts the CA Secret (its key)", w.source, c.Name)
		}
	}
}

// checkCertificateJob: a pre-install/pre-upgrade Job runs `strata cert
// kubernetes` before the pods, as a service account that may get the two
// Secrets it keeps and create Secrets, nothing else.
func checkCertificateJob(t *testing.T, objs []rendered) {
	t.Helper()
	var job *batchv1.Job
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *batchv1.Job:
			job = v
		case *rbacv1.Role:
			role = v
		case *rbacv1.RoleBinding:
			binding = v
		}
	}
	if job == nil || role == nil || binding == nil {
		t.Fatalf("no certificate Job with its Role and RoleBinding (job %v, role %v, binding %v)", job != nil, role != nil, binding != nil)
	}
	jobWeight, _ := strconv.Atoi(job.Annotations["helm.sh/hook-weight"])
	roleWeight, _ := strconv.Atoi(role.Annotations["helm.sh/hook-weight"])
	if !strings.Contains(job.Annotations["helm.sh/hook"], "pre-install") || jobWeight <= roleWeight {
		t.Errorf("Job hook %q weight %q: must run before install, after its Role (weight %q)", job.Annotations["helm.sh/hook"], job.Annotations["helm.sh/hook-weight"], role.Annotations["helm.sh/hook-weight"])
	}
	if sa := job.Spec.Template.Spec.ServiceAccountName; sa == "" || binding.Subjects[0].Name != sa || binding.RoleRef.Name != role.Name {
		t.Errorf("the Job's service account %q is not the one bound to %s", sa, role.Name)
	}
	for _, r := range role.Rules {
		if !slices.Equal(r.Resources, []string{"secrets"}) {
			t.Errorf("Role rule on %v: the Job needs Secrets only", r.Resources)
		}
		for _, verb := range r.Verbs {
			switch verb {
			case "get":
				if !slices.Equal(r.ResourceNames, []string{"rel-strata-ca", "rel-strata-admin"}) {
					t.Errorf("get on Secrets %v, want only rel-strata-ca and rel-strata-admin", r.ResourceNames)
				}
			case "create":
			default:
				t.Errorf("Role allows %q on Secrets", verb)
			}
		}
	}
}

// TestInsecureRendersPlaintext: security.insecure=true renders what the
// chart rendered before TLS was its default: --insecure on every role,
// plaintext probes, no certificates, no Job, no RBAC.
func TestInsecureRendersPlaintext(t *testing.T) {
	objs := render(t, helmBinary(t), "testdata/values-insecure.yaml")
	for _, w := range workloads(objs) {
		if len(w.pod.InitContainers) != 0 || slices.ContainsFunc(w.pod.Volumes, func(v corev1.Volume) bool { return v.Secret != nil }) {
			t.Errorf("%s: insecure pods have certificate init containers or Secret volumes", w.source)
		}
		for _, c := range w.pod.Containers {
			env := envOf(c)
			if env["STRATA_INSECURE"] != "true" {
				t.Errorf("%s: container %s: STRATA_INSECURE=%q, want true", w.source, c.Name, env["STRATA_INSECURE"])
			}
			for k := range env {
				if strings.HasPrefix(k, "STRATA_TLS_") || strings.HasPrefix(k, "STRATA_ADMIN_T") {
					t.Errorf("%s: container %s: %s set in insecure mode", w.source, c.Name, k)
				}
			}
			if c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTP {
				t.Errorf("%s: container %s: probe scheme %q", w.source, c.Name, c.ReadinessProbe.HTTPGet.Scheme)
			}
		}
	}
	for _, o := range objs {
		switch o.obj.(type) {
		case *batchv1.Job, *rbacv1.Role, *rbacv1.RoleBinding, *corev1.ServiceAccount, *corev1.Secret:
			t.Errorf("%s: insecure renders a %s", o.source, o.kind)
		}
	}
}

var strataOnce struct {
	sync.Once
	bin string
	err error
}

// strataBinary builds the strata CLI of this repository once.
func strataBinary(t *testing.T) string {
	t.Helper()
	strataOnce.Do(func() {
		root, err := filepath.Abs("../../..")
		if err != nil {
			strataOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "chartcheck-strata")
		if err != nil {
			strataOnce.err = err
			return
		}
		strataOnce.bin = filepath.Join(dir, "strata")
		cmd := exec.Command("go", "build", "-o", strataOnce.bin, "./cmd/strata")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			strataOnce.err = fmt.Errorf("go build ./cmd/strata: %v\n%s", err, out)
		}
	})
	if strataOnce.err != nil {
		t.Fatal(strataOnce.err)
	}
	return strataOnce.bin
}

// The fake pod a workload's templates are expanded for.
const podIP = "10.9.8.7"

func podName(w workload) string {
	if w.role == "broker" {
		return "rel-strata-broker-5d8f7c-x2x9q"
	}
	return "rel-strata-" + w.role + "-0"
}

var envRef = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

// expand replaces $(VAR) as the kubelet does, from vars.
func expand(s string, vars map[string]string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// TestPodCertificates runs each role's certificate init container, as
// rendered, with the strata CLI of this repository against a CA made by
// `strata cert ca`, and checks what it issues: the certificate carries the
// role internal/pki reads (urn:strata:role:ROLE) and the pod's name (the
// node's id), chains to the CA, and is valid for every address the node
// is dialled at (its advertised address, metad's endpoints and Raft
// peers, the brokers' Service and Kafka address); its files are where the
// node's TLS settings point. The Job's command line is checked to parse.
func TestPodCertificates(t *testing.T) {
	objs := render(t, helmBinary(t), "")
	bin := strataBinary(t)
	caDir := filepath.Join(t.TempDir(), "ca")
	if out, err := exec.Command(bin, "cert", "ca", caDir).CombinedOutput(); err != nil {
		t.Fatalf("strata cert ca: %v\n%s", err, out)
	}
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, w := range workloads(objs) {
		t.Run(w.role, func(t *testing.T) { checkPodCertificate(t, bin, caDir, roots, w) })
	}
	t.Run("job", func(t *testing.T) {
		for _, o := range objs {
			job, ok := o.obj.(*batchv1.Job)
			if !ok {
				continue
			}
			// Outside a pod it stops after parsing its flags, saying so.
			cmd := exec.Command(bin, job.Spec.Template.Spec.Containers[0].Command[1:]...)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "KUBERNETES_") })
			out, err := cmd.CombinedOutput()
			if err == nil || !bytes.Contains(out, []byte("not in a Kubernetes pod")) {
				t.Fatalf("%v: %v\n%s", job.Spec.Template.Spec.Containers[0].Command, err, out)
			}
		}
	})
}

// checkPodCertificate runs w's certificate init container as rendered
// (for a pod of w) and checks what it wrote (TestPodCertificates).
func checkPodCertificate(t *testing.T, bin, caDir string, roots *x509.CertPool, w workload) {
	vars := map[string]string{"POD_NAME": podName(w), "POD_IP": podIP}
	tlsDir := t.TempDir()
	var args []string
	for _, a := range w.pod.InitContainers[0].Command[1:] {
		a = strings.NewReplacer("--ca=/ca", "--ca="+caDir, "--out=/tls", "--out="+tlsDir).Replace(expand(a, vars))
		args = append(args, a)
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("init container %v: %v\n%s", args, err, out)
	}
	env := map[string]string{}
	for _, e := range w.pod.Containers[0].Env {
		if e.ValueFrom == nil {
			env[e.Name] = expand(e.Value, vars)
			vars[e.Name] = env[e.Name]
		}
	}
	local := func(p string) string { return filepath.Join(tlsDir, strings.TrimPrefix(p, "/tls/")) }
	for _, k := range []string{"STRATA_TLS_CERT_FILE", "STRATA_TLS_KEY_FILE", "STRATA_TLS_CA_FILE"} {
		if !strings.HasPrefix(env[k], "/tls/") {
			t.Fatalf("%s=%q is not in the init container's output", k, env[k])
		}
		if _, err := os.Stat(local(env[k])); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	certPEM, err := os.ReadFile(local(env["STRATA_TLS_CERT_FILE"]))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var uris []string
	for _, u := range cert.URIs {
		uris = append(uris, u.String())
	}
	if !slices.Equal(uris, []string{"urn:strata:role:" + w.role}) || cert.Subject.CommonName != vars["POD_NAME"] || env["STRATA_ID"] != cert.Subject.CommonName {
		t.Fatalf("certificate names %v, CN %q; want role %s, CN the pod name = STRATA_ID %q", uris, cert.Subject.CommonName, w.role, env["STRATA_ID"])
	}
	for _, host := range dialledAs(t, w, env) {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("not valid for %s, which it is dialled at: %v", host, err)
		}
	}
}

// dialledAs lists the hosts a node of w is dialled at, from the rendered
// settings of the cluster (env is w's own, expanded).
func dialledAs(t *testing.T, w workload, env map[string]string) []string {
	t.Helper()
	host := func(addr string) string {
		h, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("address %q: %v", addr, err)
		}
		return h
	}
	hosts := []string{host(env["STRATA_ADVERTISE"])}
	switch w.role {
	case "metad":
		self := env["STRATA_ADVERTISE"]
		if !slices.Contains(strings.Split(env["STRATA_METAD"], ","), self) {
			t.Errorf("metad advertises %s, not one of STRATA_METAD %s", self, env["STRATA_METAD"])
		}
		for _, p := range strings.Split(env["STRATA_PEERS"], ",") {
			if id, addr, _ := strings.Cut(p, "="); id == env["STRATA_ID"] {
				hosts = append(hosts, host(addr)) // Raft
			}
		}
		hosts = append(hosts, host(env["STRATA_RAFT_LISTEN"]))
	case "broker":
		hosts = append(hosts, host(env["STRATA_BROKER"]), host(env["STRATA_KAFKA_ADVERTISED"]), host(env["STRATA_ADMIN_LISTEN"]))
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}
