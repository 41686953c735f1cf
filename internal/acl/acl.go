package acl

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Keys in metad (see the package doc).
const (
	UsersPrefix = "/strata/security/users/"
	ACLsPrefix  = "/strata/security/acls/"
)

// UserKey is the metad key of a user's credential.
func UserKey(name string) string { return UsersPrefix + name }

// ErrInvalid is returned for a rule, principal or name that cannot be
// stored.
var ErrInvalid = errors.New("acl: invalid")

// ResourceType is what a rule protects.
type ResourceType string

// Resource types.
const (
	Topic   ResourceType = "topic"
	Group   ResourceType = "group"
	Cluster ResourceType = "cluster"
)

// ClusterName is the name of the one cluster resource.
const ClusterName = "cluster"

// Operation is what a principal does to a resource.
type Operation string

// Operations.
const (
	Read     Operation = "read"
	Write    Operation = "write"
	Create   Operation = "create"
	Delete   Operation = "delete"
	Alter    Operation = "alter"
	Describe Operation = "describe"
	All      Operation = "all"
)

// Operations lists every operation a rule may name.
var Operations = []Operation{Read, Write, Create, Delete, Alter, Describe, All}

// Permission says whether a rule allows or denies.
type Permission string

// Permissions.
const (
	Allow Permission = "allow"
	Deny  Permission = "deny"
)

// PatternType says how a rule's name matches.
type PatternType string

// Pattern types.
const (
	Literal  PatternType = "literal"
	Prefixed PatternType = "prefixed"
)

// AnyUser is the principal of rules for every user.
const AnyUser = "User:*"

// Resource names one protected thing.
type Resource struct {
	Type ResourceType
	Name string
}

func (r Resource) String() string {
	if r.Type == Cluster {
		return "cluster"
	}
	return fmt.Sprintf("%s %q", r.Type, r.Name)
}

// TopicResource is the topic name.
func TopicResource(name string) Resource { return Resource{Topic, name} }

// GroupResource is the consumer group name.
func GroupResource(name string) Resource { return Resource{Group, name} }

// ClusterResource is the cluster.
var ClusterResource = Resource{Cluster, ClusterName}

// Rule is one ACL entry.
type Rule struct {
	Principal  string       `json:"principal"`
	Permission Permission   `json:"permission"`
	Operation  Operation    `json:"operation"`
	Resource   ResourceType `json:"resource"`
	Name       string       `json:"name"`
	Pattern    PatternType  `json:"pattern"`
}

// UserPrincipal is the principal of the user NAME.
func UserPrincipal(name string) string { return "User:" + name }

// ParsePrincipal checks "User:NAME" or "User:*".
func ParsePrincipal(s string) (string, error) {
	name, ok := strings.CutPrefix(s, "User:")
	if !ok || name == "" {
		return "", fmt.Errorf("%w: principal %q: want User:NAME or User:*", ErrInvalid, s)
	}
	return s, nil
}

// ValidUserName reports whether name may be a user's (and so a metad key
// segment): 1-255 bytes, no '/', no control characters, not "*".
func ValidUserName(name string) error {
	if name == "" || len(name) > 255 || name == "*" || strings.ContainsAny(name, "/:") ||
		strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%w: user name %q: want 1-255 bytes without '/', ':' or control characters, not \"*\"", ErrInvalid, name)
	}
	return nil
}

// Validate reports what is wrong with r.
func (r Rule) Validate() error {
	if _, err := ParsePrincipal(r.Principal); err != nil {
		return err
	}
	if r.Permission != Allow && r.Permission != Deny {
		return fmt.Errorf("%w: permission %q: want allow or deny", ErrInvalid, r.Permission)
	}
	if !slices.Contains(Operations, r.Operation) {
		return fmt.Errorf("%w: operation %q: want read, write, create, delete, alter, describe or all", ErrInvalid, r.Operation)
	}
	if r.Pattern != Literal && r.Pattern != Prefixed {
		return fmt.Errorf("%w: pattern %q: want literal or prefixed", ErrInvalid, r.Pattern)
	}
	switch r.Resource {
	case Topic, Group:
		if r.Name == "" {
			return fmt.Errorf("%w: a %s rule needs a name", ErrInvalid, r.Resource)
		}
	case Cluster:
		if r.Name != ClusterName || r.Pattern != Literal {
			return fmt.Errorf("%w: a cluster rule is literal and named %q", ErrInvalid, ClusterName)
		}
	default:
		return fmt.Errorf("%w: resource %q: want topic, group or cluster", ErrInvalid, r.Resource)
	}
	return nil
}

// ID is the rule's key under ACLsPrefix: every field, escaped so that
// the key has no '/' of its own.
func (r Rule) ID() string {
	return strings.Join([]string{string(r.Resource), string(r.Pattern), url.PathEscape(r.Name),
		url.PathEscape(r.Principal), string(r.Permission), string(r.Operation)}, ":")
}

// Key is the rule's metad key.
func (r Rule) Key() string { return ACLsPrefix + r.ID() }

// Marshal encodes r for metad.
func (r Rule) Marshal() []byte {
	b, _ := json.Marshal(r)
	return b
}

// Unmarshal decodes and validates a stored rule.
func Unmarshal(b []byte) (Rule, error) {
	var r Rule
	if err := json.Unmarshal(b, &r); err != nil {
		return Rule{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return r, r.Validate()
}

func (r Rule) String() string {
	name := r.Resource.String()
	if r.Resource != Cluster {
		name = fmt.Sprintf("%s %q", r.Resource, r.Name)
		if r.Pattern == Prefixed {
			name = fmt.Sprintf("%s prefixed %q", r.Resource, r.Name)
		}
	}
	return fmt.Sprintf("%s %s %s on %s", r.Permission, r.Principal, r.Operation, name)
}

func (t ResourceType) String() string { return string(t) }

// matches reports whether r's principal, resource and name cover the
// request (operation aside).
func (r Rule) matches(principal string, res Resource) bool {
	if r.Principal != principal && r.Principal != AnyUser {
		return false
	}
	if r.Resource != res.Type {
		return false
	}
	if r.Pattern == Prefixed {
		return strings.HasPrefix(res.Name, r.Name)
	}
	return r.Name == res.Name || r.Name == "*"
}

// impliesDescribe: allows of these operations also allow describe (AC4).
var impliesDescribe = []Operation{Read, Write, Delete, Alter}

// InternalTopic reports whether a topic is internal (AC1).
func InternalTopic(name string) bool { return strings.HasPrefix(name, "__") }

// Decision is the answer to one request.
type Decision struct {
	Allowed bool
	// Reason says why, for the PERMISSION_DENIED message and the log.
	Reason string
}

// Authorizer holds one immutable set of rules and super-users. Build a
// new one when they change; safe for concurrent use.
type Authorizer struct {
	byType     map[ResourceType][]Rule
	superUsers map[string]bool
}

// NewAuthorizer indexes rules (invalid ones are skipped: Unmarshal
// refuses them before) and super-user principals.
func NewAuthorizer(rules []Rule, superUsers []string) *Authorizer {
	a := &Authorizer{byType: map[ResourceType][]Rule{}, superUsers: map[string]bool{}}
	for _, r := range rules {
		if r.Validate() == nil {
			a.byType[r.Resource] = append(a.byType[r.Resource], r)
		}
	}
	for _, s := range superUsers {
		a.superUsers[s] = true
	}
	return a
}

// IsSuperUser reports whether principal is a configured super-user.
func (a *Authorizer) IsSuperUser(principal string) bool { return a.superUsers[principal] }

// Authorize decides whether principal may do op on res; super says the
// caller is a super-user by other means (an admin certificate).
func (a *Authorizer) Authorize(principal string, super bool, op Operation, res Resource) Decision {
	if res.Type == Topic && InternalTopic(res.Name) && (op == Write || op == Create || op == Delete) {
		return Decision{Reason: fmt.Sprintf("topic %q is internal: no client may %s it", res.Name, op)}
	}
	if super || a.superUsers[principal] {
		return Decision{Allowed: true, Reason: "super-user"}
	}
	var allow *Rule
	for i, r := range a.byType[res.Type] {
		if !r.matches(principal, res) {
			continue
		}
		switch r.Permission {
		case Deny:
			if r.Operation == op || r.Operation == All {
				return Decision{Reason: "denied by rule: " + r.String()}
			}
		case Allow:
			if allow == nil && (r.Operation == op || r.Operation == All ||
				(op == Describe && slices.Contains(impliesDescribe, r.Operation))) {
				allow = &a.byType[res.Type][i]
			}
		}
	}
	if allow != nil {
		return Decision{Allowed: true, Reason: "allowed by rule: " + allow.String()}
	}
	return Decision{Reason: "no ACL allows it"}
}
