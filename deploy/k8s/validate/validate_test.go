// Package validate checks deploy/k8s offline (no cluster, no schema download): every document
// decodes strictly into its Kubernetes API type, so a misspelt or misplaced field is an
// error as the API server's strict field validation would make it, and the objects agree
// with one another (selectors, the headless Service, the router's pool, port names).
package validate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// manifestDir is deploy/k8s, or MEMFLEET_K8S_DIR when a test points it elsewhere.
func manifestDir() string {
	if dir := os.Getenv("MEMFLEET_K8S_DIR"); dir != "" {
		return dir
	}
	return ".."
}

// Objects holds every decoded document of the manifests, by kind and name.
type Objects struct {
	Services     map[string]*corev1.Service
	StatefulSets map[string]*appsv1.StatefulSet
	Deployments  map[string]*appsv1.Deployment
	ConfigMaps   map[string]*corev1.ConfigMap
}

// splitDocuments cuts a multi-document YAML file at its `---` lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

// decodeStrict decodes one document into obj as the API server's strict field validation
// does: YAML to JSON refusing duplicate keys, then case-sensitive JSON refusing unknown
// fields (sigs.k8s.io/yaml's own UnmarshalStrict goes through encoding/json, which matches
// field names case-insensitively and so would take `servicename` for `serviceName`).
func decodeStrict(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// Load decodes every *.yaml file of dir.
func Load(dir string) (*Objects, error) {
	objs := &Objects{
		Services:     map[string]*corev1.Service{},
		StatefulSets: map[string]*appsv1.StatefulSet{},
		Deployments:  map[string]*appsv1.Deployment{},
		ConfigMaps:   map[string]*corev1.ConfigMap{},
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml files in %s", dir)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		for i, doc := range splitDocuments(data) {
			if err := objs.add(doc); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", filepath.Base(file), i+1, err)
			}
		}
	}
	return objs, nil
}

func (o *Objects) add(doc []byte) error {
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return err
	}
	var name string
	var err error
	switch meta.APIVersion + "/" + meta.Kind {
	case "v1/Service":
		name, err = put(doc, o.Services)
	case "apps/v1/StatefulSet":
		name, err = put(doc, o.StatefulSets)
	case "apps/v1/Deployment":
		name, err = put(doc, o.Deployments)
	case "v1/ConfigMap":
		name, err = put(doc, o.ConfigMaps)
	default:
		return fmt.Errorf("unexpected kind %q (apiVersion %q)", meta.Kind, meta.APIVersion)
	}
	if err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("%s without metadata.name", meta.Kind)
	}
	return nil
}

// put decodes one document strictly into a new T and files it under its name.
func put[T any, P interface {
	*T
	metav1.Object
}](doc []byte, into map[string]P) (string, error) {
	obj := P(new(T))
	if err := decodeStrict(doc, obj); err != nil {
		return "", err
	}
	into[obj.GetName()] = obj
	return obj.GetName(), nil
}

// selects reports whether a selector's labels all appear in a pod template's labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// namedPort reports whether a container of the pod spec declares the port name.
func namedPort(spec corev1.PodSpec, name string) bool {
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// Check returns every disagreement between the objects (empty when they fit together).
func (o *Objects) Check() []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	serviceFor := func(spec corev1.PodSpec, labels map[string]string) []*corev1.Service {
		var found []*corev1.Service
		for _, svc := range o.Services {
			if selects(svc.Spec.Selector, labels) {
				found = append(found, svc)
				for _, p := range svc.Spec.Ports {
					if p.TargetPort.StrVal != "" && !namedPort(spec, p.TargetPort.StrVal) {
						bad("service %s: targetPort %q is not a container port name", svc.Name, p.TargetPort.StrVal)
					}
				}
			}
		}
		return found
	}

	for _, sts := range o.StatefulSets {
		tmpl := sts.Spec.Template
		if sts.Spec.Selector == nil || !selects(sts.Spec.Selector.MatchLabels, tmpl.Labels) {
			bad("statefulset %s: selector does not match its pod template", sts.Name)
		}
		svc, ok := o.Services[sts.Spec.ServiceName]
		if !ok {
			bad("statefulset %s: serviceName %q has no Service", sts.Name, sts.Spec.ServiceName)
		} else if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			bad("statefulset %s: service %s must be headless (clusterIP: None) for per-pod DNS", sts.Name, svc.Name)
		}
		if len(serviceFor(tmpl.Spec, tmpl.Labels)) == 0 {
			bad("statefulset %s: no Service selects its pods", sts.Name)
		}
	}
	for _, dep := range o.Deployments {
		tmpl := dep.Spec.Template
		if dep.Spec.Selector == nil || !selects(dep.Spec.Selector.MatchLabels, tmpl.Labels) {
			bad("deployment %s: selector does not match its pod template", dep.Name)
		}
		for _, vol := range tmpl.Spec.Volumes {
			if vol.ConfigMap != nil {
				if _, ok := o.ConfigMaps[vol.ConfigMap.Name]; !ok {
					bad("deployment %s: volume %s names missing ConfigMap %s", dep.Name, vol.Name, vol.ConfigMap.Name)
				}
			}
		}
		if len(serviceFor(tmpl.Spec, tmpl.Labels)) == 0 {
			bad("deployment %s: no Service selects its pods", dep.Name)
		}
	}
	problems = append(problems, o.checkPoolNames()...)
	return problems
}

// serverLine matches a nutcracker.yml server entry (`- ENTRY`); srvEntry and dnsEntry the
// DNS-membership forms `srv:_PORTNAME._PROTO.SERVICE[.NAMESPACE...]:WEIGHT` and
// `dns:SERVICE[.NAMESPACE...]:PORT:WEIGHT`; hostEntry a written `host:port:weight [name]`.
var (
	serverLine = regexp.MustCompile(`(?m)^\s*-\s+(\S+)`)
	srvEntry   = regexp.MustCompile(`^srv:_([^.]+)\._(tcp|udp)\.([^.:]+)[^:]*:\d+$`)
	dnsEntry   = regexp.MustCompile(`^dns:([^.:]+)[^:]*:(\d+):\d+$`)
	hostEntry  = regexp.MustCompile(`^([^\s:]+):\d+:\d+$`)
)

// checkPoolNames checks that the router's pools reach every StatefulSet's pods, and nothing
// else: through a DNS-membership entry on the StatefulSet's headless Service (its named port
// for `srv:`, its port number for `dns:`), or by listing every pod DNS name
// (`<sts>-<ordinal>.<service>`, ordinals below the replica count).
func (o *Objects) checkPoolNames() []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for _, cm := range o.ConfigMaps {
		conf, ok := cm.Data["nutcracker.yml"]
		if !ok {
			continue
		}
		entries := serverLine.FindAllStringSubmatch(conf, -1)
		if len(entries) == 0 {
			bad("configmap %s: nutcracker.yml lists no servers", cm.Name)
		}
		followed := map[string]bool{} // Services named by a DNS-membership entry
		listed := map[string]bool{}   // pod names written out
		for _, e := range entries {
			entry := e[1]
			if m := srvEntry.FindStringSubmatch(entry); m != nil {
				svc := o.headless(m[3])
				if svc == nil {
					bad("configmap %s: %s: no headless Service %s", cm.Name, entry, m[3])
					continue
				}
				found := false
				for _, p := range svc.Spec.Ports {
					found = found || (p.Name == m[1] && strings.EqualFold(string(p.Protocol), m[2]))
				}
				if !found {
					bad("configmap %s: %s: service %s has no %s port named %s", cm.Name, entry, svc.Name, m[2], m[1])
				}
				followed[svc.Name] = true
			} else if m := dnsEntry.FindStringSubmatch(entry); m != nil {
				svc := o.headless(m[1])
				if svc == nil {
					bad("configmap %s: %s: no headless Service %s", cm.Name, entry, m[1])
					continue
				}
				found := false
				for _, p := range svc.Spec.Ports {
					found = found || fmt.Sprint(p.Port) == m[2]
				}
				if !found {
					bad("configmap %s: %s: service %s has no port %s", cm.Name, entry, svc.Name, m[2])
				}
				followed[svc.Name] = true
			} else if m := hostEntry.FindStringSubmatch(entry); m != nil {
				listed[m[1]] = true
			} else {
				bad("configmap %s: server entry %q is not host:port:weight, dns: or srv:", cm.Name, entry)
			}
		}
		for _, sts := range o.StatefulSets {
			if followed[sts.Spec.ServiceName] {
				continue
			}
			replicas := int32(1)
			if sts.Spec.Replicas != nil {
				replicas = *sts.Spec.Replicas
			}
			for i := int32(0); i < replicas; i++ {
				host := fmt.Sprintf("%s-%d.%s", sts.Name, i, sts.Spec.ServiceName)
				if !listed[host] {
					bad("configmap %s: pod %s is not in the pool", cm.Name, host)
				}
				delete(listed, host)
			}
		}
		for host := range listed {
			bad("configmap %s: server %s is no StatefulSet pod", cm.Name, host)
		}
		for name := range followed {
			serves := false
			for _, sts := range o.StatefulSets {
				serves = serves || sts.Spec.ServiceName == name
			}
			if !serves {
				bad("configmap %s: service %s is no StatefulSet's service", cm.Name, name)
			}
		}
	}
	return problems
}

// headless returns the Service of that name when it is headless (nil otherwise).
func (o *Objects) headless(name string) *corev1.Service {
	svc, ok := o.Services[name]
	if !ok || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		return nil
	}
	return svc
}

func TestManifestsDecodeStrictlyAndAgree(t *testing.T) {
	objs, err := Load(manifestDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.StatefulSets) == 0 || len(objs.Deployments) == 0 || len(objs.ConfigMaps) == 0 || len(objs.Services) < 2 {
		t.Fatalf("expected a StatefulSet, a Deployment, a ConfigMap and two Services; got %d, %d, %d, %d",
			len(objs.StatefulSets), len(objs.Deployments), len(objs.ConfigMaps), len(objs.Services))
	}
	for _, p := range objs.Check() {
		t.Error(p)
	}
}

// corrupt writes the manifests to a temporary directory with one substitution made.
func corrupt(t *testing.T, file, from, to string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(manifestDir(), "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == file {
			if !bytes.Contains(data, []byte(from)) {
				t.Fatalf("%s does not contain %q", file, from)
			}
			data, changed = bytes.Replace(data, []byte(from), []byte(to), 1), true
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !changed {
		t.Fatalf("no file %s", file)
	}
	return dir
}

func TestMisspeltFieldsFail(t *testing.T) {
	cases := []struct{ file, from, to, want string }{
		{"serve.yaml", "serviceName:", "servicename:", `unknown field "spec.servicename"`},
		{"serve.yaml", "podManagementPolicy:", "podManagmentPolicy:", `unknown field "spec.podManagmentPolicy"`},
		{"serve.yaml", "  clusterIP: None", "  clusterIP: None\n  clusterIP: None", "already set"},
		{"serve.yaml", "containerPort:", "containerport:", `unknown field "spec.template.spec.containers[0].ports[0].containerport"`},
		{"route.yaml", "readOnly: true", "readonly: true", `unknown field "spec.template.spec.containers[0].volumeMounts[0].readonly"`},
		{"route.yaml", "  replicas: 2", "  replica: 2", `unknown field "spec.replica"`},
	}
	for _, c := range cases {
		t.Run(c.file+"/"+c.to, func(t *testing.T) {
			_, err := Load(corrupt(t, c.file, c.from, c.to))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
}

func TestInconsistentObjectsFail(t *testing.T) {
	cases := []struct{ file, from, to, want string }{
		{"serve.yaml", "clusterIP: None", "clusterIP: \"\"", "must be headless"},
		{"route.yaml", "srv:_memcache._tcp.memfleet:1", "srv:_memcached._tcp.memfleet:1", "service memfleet has no tcp port named memcached"},
		{"route.yaml", "srv:_memcache._tcp.memfleet:1", "srv:_memcache._tcp.memfleet-route:1", "no headless Service memfleet-route"},
		{"route.yaml", "srv:_memcache._tcp.memfleet:1", "dns:memfleet:11212:1", "service memfleet has no port 11212"},
		{"route.yaml", "srv:_memcache._tcp.memfleet:1", "memfleet-0.memfleet:11211:1 memfleet-0", "memfleet-2.memfleet is not in the pool"},
		{"route.yaml", "name: memfleet-route\n---", "name: memfleet-routes\n---", "missing ConfigMap memfleet-route"},
		{"serve.yaml", "targetPort: memcache", "targetPort: memcached", `targetPort "memcached"`},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			objs, err := Load(corrupt(t, c.file, c.from, c.to))
			if err != nil {
				t.Fatal(err)
			}
			found := strings.Join(objs.Check(), "\n")
			if !strings.Contains(found, c.want) {
				t.Fatalf("want a problem containing %q, got:\n%s", c.want, found)
			}
		})
	}
}
