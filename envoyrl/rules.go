package envoyrl

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// ConfigError is a rule file that cannot be loaded: File names it and Reason
// says why, in the words envoyproxy/ratelimit uses for the same fault.
type ConfigError struct {
	File   string
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("envoyrl: %s: %s", e.File, e.Reason)
}

// File is one rule file's name and content.
type File struct {
	Name    string
	Content []byte
}

// Limit is a configured limit: what a matching descriptor is counted against.
type Limit struct {
	// Proto is the limit as the response's current_limit reports it.
	Proto *rlsv3.RateLimitResponse_RateLimit
	// Unlimited descriptors are never counted and always OK.
	Unlimited bool
	// ShadowMode limits are counted and reported but never answer OVER_LIMIT.
	ShadowMode bool
	// Name is the rate_limit name other limits may replace.
	Name string
	// Replaces lists the names of limits this one removes from a request.
	Replaces []string
	// DetailedMetric reports the descriptor's values in the rule label.
	DetailedMetric bool
	// Rule is the rule's path, domain.key_value.key…, the metrics label.
	Rule string
	// Domain is the domain the limit belongs to.
	Domain string
	// QuotaMode limits are counted, and a descriptor over one is answered
	// OK with its current_limit and nothing remaining, without making the
	// answer OVER_LIMIT (envoyproxy/ratelimit's per-rule quota_mode).
	QuotaMode bool
	// divider is the window length in seconds.
	divider int64
}

// node is one level of a domain's descriptor tree.
type node struct {
	children        map[string]*node
	limit           *Limit
	wildcardKeys    []string // children whose key_value ends in '*', in file order
	shareThreshold  bool
	wildcardPattern string // key_value* when share_threshold is set
}

// Rules is a loaded, immutable set of rule files: domains and their
// descriptor trees. It is safe for concurrent use.
type Rules struct {
	domains map[string]*node
	files   []string
}

// Files returns the names of the files the rules were loaded from.
func (r *Rules) Files() []string { return append([]string(nil), r.files...) }

// Domains returns the names of the loaded domains, sorted.
func (r *Rules) Domains() []string {
	out := make([]string, 0, len(r.domains))
	for d := range r.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// validKeys are the keys a rule file may use, as envoyproxy/ratelimit
// accepts them.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true,
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

// Parse loads rule files in envoyproxy/ratelimit's format. It refuses what
// that service refuses, with the file and the reason: bad YAML, an unknown
// key, an empty domain or key, a domain in two files, a duplicate
// key_value at one level, an invalid unit, a unit on an unlimited limit,
// an empty or self-naming replaces entry, share_threshold without a
// wildcard value.
func Parse(files []File) (*Rules, error) { return ParseWith(files, ParseOptions{}) }

// ParseOptions tune ParseWith.
type ParseOptions struct {
	// MergeDomains merges the files that name one domain into it, in file
	// order, instead of refusing the second (envoyproxy/ratelimit's
	// MERGE_DOMAIN_CONFIG): a key_value at one level of the domain may
	// still be defined once only, across its files.
	MergeDomains bool
}

// ParseWith is Parse with options.
func ParseWith(files []File, o ParseOptions) (*Rules, error) {
	r := &Rules{domains: map[string]*node{}}
	for _, f := range files {
		root, err := decodeFile(f)
		if err != nil {
			return nil, err
		}
		if root.Domain == "" {
			return nil, &ConfigError{f.Name, "config file cannot have empty domain"}
		}
		d, dup := r.domains[root.Domain]
		switch {
		case dup && !o.MergeDomains:
			return nil, &ConfigError{f.Name, fmt.Sprintf("duplicate domain '%s' in config file", root.Domain)}
		case !dup:
			d = &node{children: map[string]*node{}}
		}
		if err := d.load(f.Name, root.Domain, root.Domain+".", root.Descriptors); err != nil {
			return nil, err
		}
		r.domains[root.Domain] = d
		r.files = append(r.files, f.Name)
	}
	return r, nil
}

// Limits returns every limit of the rules, unlimited ones included, in
// the order of their Rule.
func (r *Rules) Limits() []*Limit {
	var out []*Limit
	var walk func(n *node)
	walk = func(n *node) {
		if n.limit != nil {
			out = append(out, n.limit)
		}
		for _, c := range n.children {
			walk(c)
		}
	}
	for _, d := range r.domains {
		walk(d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rule < out[j].Rule })
	return out
}

// Dump writes the rules in force as envoyproxy/ratelimit's /rlconfig
// does, one line per limit, sorted:
//
//	domain.key_value: unit=HOUR requests_per_unit=3, shadow_mode: false, quota_mode: false
//
// An unlimited limit shows unit=UNKNOWN requests_per_unit=0.
func (r *Rules) Dump() string {
	var b strings.Builder
	for _, l := range r.Limits() {
		fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n",
			l.Rule, l.Proto.GetUnit(), l.Proto.GetRequestsPerUnit(), l.ShadowMode, l.QuotaMode)
	}
	return b.String()
}

// decodeFile decodes a file, then checks its keys and leaf types. The
// decoder's own bound on aliases acts first, so that a file of nested
// aliases (a few kilobytes that expand to billions of nodes) is refused
// before the check walks it; the check has a bound of its own besides.
func decodeFile(f File) (*yamlRoot, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Content, &doc); err != nil {
		return nil, &ConfigError{f.Name, "error loading config file: " + err.Error()}
	}
	var root yamlRoot
	if len(doc.Content) == 0 {
		return &root, nil
	}
	// A *yaml.TypeError is reported after the keys are checked, as
	// envoyproxy/ratelimit orders them; any other error (excessive
	// aliasing) at once.
	decodeErr := doc.Content[0].Decode(&root)
	var te *yaml.TypeError
	if decodeErr != nil && !errors.As(decodeErr, &te) {
		return nil, &ConfigError{f.Name, "error loading config file: " + decodeErr.Error()}
	}
	w := keyWalk{budget: maxCheckedNodes}
	if err := w.checkKeys(doc.Content[0]); err != nil {
		return nil, &ConfigError{f.Name, err.Error()}
	}
	if decodeErr != nil {
		return nil, &ConfigError{f.Name, "error loading config file: " + decodeErr.Error()}
	}
	return &root, nil
}

// maxCheckedNodes bounds the nodes the key check visits, aliases
// expanded: far more than any rule file has, far fewer than a file of
// nested aliases expands to.
const maxCheckedNodes = 1 << 20

// keyWalk checks a file's keys within a budget of nodes.
type keyWalk struct{ budget int }

// checkKeys walks a mapping: every key must be known, lists must hold
// mappings, leaves must be strings, integers, booleans or null.
func (w *keyWalk) checkKeys(m *yaml.Node) error {
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("config error, file is not a map of keys")
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return fmt.Errorf("config error, key is not of type string: %v", k.Value)
		}
		if !validKeys[k.Value] {
			return fmt.Errorf("config error, unknown key '%s'", k.Value)
		}
		if err := w.checkValue(v); err != nil {
			return err
		}
	}
	return nil
}

func (w *keyWalk) checkValue(v *yaml.Node) error {
	if w.budget--; w.budget < 0 {
		return fmt.Errorf("config error, more than %d nodes with aliases expanded", maxCheckedNodes)
	}
	switch v.Kind {
	case yaml.SequenceNode:
		for _, e := range v.Content {
			if e.Kind != yaml.MappingNode {
				return fmt.Errorf("config error, yaml file contains list of type other than map: %v", e.Value)
			}
			if err := w.checkKeys(e); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		return w.checkKeys(v)
	case yaml.ScalarNode:
		switch v.Tag {
		case "!!str", "!!int", "!!bool", "!!null":
		default:
			return fmt.Errorf("error checking config")
		}
	case yaml.AliasNode:
		return w.checkValue(v.Alias)
	default:
		return fmt.Errorf("error checking config")
	}
	return nil
}

func (n *node) load(file, domain, parentKey string, descriptors []yamlDescriptor) error {
	for _, dc := range descriptors {
		if dc.Key == "" {
			return &ConfigError{file, "descriptor has empty key"}
		}
		finalKey := dc.Key
		if dc.Value != "" {
			finalKey += "_" + dc.Value
		}
		path := parentKey + finalKey
		if _, dup := n.children[finalKey]; dup {
			return &ConfigError{file, fmt.Sprintf("duplicate descriptor composite key '%s'", path)}
		}
		limit, err := newLimit(file, domain, path, dc)
		if err != nil {
			return err
		}
		wildcard := strings.HasSuffix(finalKey, "*")
		if dc.ShareThreshold && !wildcard {
			return &ConfigError{file, fmt.Sprintf(
				"share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", finalKey)}
		}
		child := &node{children: map[string]*node{}, limit: limit, shareThreshold: dc.ShareThreshold}
		if dc.ShareThreshold {
			child.wildcardPattern = finalKey
		}
		if wildcard {
			n.wildcardKeys = append(n.wildcardKeys, finalKey)
		}
		if err := child.load(file, domain, path+".", dc.Descriptors); err != nil {
			return err
		}
		n.children[finalKey] = child
	}
	return nil
}

// newLimit builds a descriptor's limit, nil when it has none.
func newLimit(file, domain, path string, dc yamlDescriptor) (*Limit, error) {
	rl := dc.RateLimit
	if rl == nil {
		return nil, nil
	}
	unit, valid := ParseUnit(rl.Unit)
	if rl.Unlimited && valid {
		return nil, &ConfigError{file, "should not specify rate limit unit when unlimited"}
	}
	if !rl.Unlimited && !valid {
		return nil, &ConfigError{file, fmt.Sprintf("invalid rate limit unit '%s'", rl.Unit)}
	}
	l := &Limit{
		Proto:          &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rl.RequestsPerUnit, Unit: unit, Name: rl.Name},
		Unlimited:      rl.Unlimited,
		ShadowMode:     dc.ShadowMode,
		Name:           rl.Name,
		DetailedMetric: dc.DetailedMetric,
		Rule:           path,
		Domain:         domain,
		QuotaMode:      dc.QuotaMode,
	}
	if valid {
		l.divider = UnitSeconds(unit)
	}
	for _, r := range rl.Replaces {
		if r.Name == "" {
			return nil, &ConfigError{file, "should not have an empty replaces entry"}
		}
		if r.Name == rl.Name {
			return nil, &ConfigError{file, "replaces should not contain name of same descriptor"}
		}
		l.Replaces = append(l.Replaces, r.Name)
	}
	return l, nil
}

// ParseUnit maps a unit name (second, minute, hour, day, week, month, year;
// any case) to its protocol value; ok is false for anything else.
func ParseUnit(s string) (unit rlsv3.RateLimitResponse_RateLimit_Unit, ok bool) {
	v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	if !ok || v == int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN) {
		return rlsv3.RateLimitResponse_RateLimit_UNKNOWN, false
	}
	return rlsv3.RateLimitResponse_RateLimit_Unit(v), true
}

// UnitSeconds is the window length of unit in seconds, as
// envoyproxy/ratelimit counts it: a month is 30 days, a year 365; 0 for
// UNKNOWN.
func UnitSeconds(unit rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	const day = 24 * 60 * 60
	switch unit {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 60 * 60
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return day
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// LoadDir loads every *.yaml and *.yml file directly in dir, in name order,
// skipping names that start with a dot.
func LoadDir(dir string) (*Rules, error) {
	files, err := ReadDir(dir)
	if err != nil {
		return nil, err
	}
	return Parse(files)
}

// ReadDir reads the rule files of dir as LoadDir selects them.
func ReadDir(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, &ConfigError{dir, err.Error()}
	}
	var files []File
	for _, e := range entries {
		name := e.Name()
		if !isRuleFile(name) || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &ConfigError{path, err.Error()}
		}
		files = append(files, File{Name: path, Content: b})
	}
	return files, nil
}

func isRuleFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	ext := filepath.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

// unlimitedRemaining is the limit_remaining envoyproxy/ratelimit reports for
// an unlimited descriptor.
const unlimitedRemaining = math.MaxUint32
