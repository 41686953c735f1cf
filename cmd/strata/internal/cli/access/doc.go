// Package access is the users-and-ACLs side of the strata command-line
// tool: the rule an `acl add|remove` names (RuleSpec, its flags), and the
// listings of `acl list` and `user list` read from metad (Rules, Users:
// text tables or JSON). Credentials are never printed: a user's listing
// holds its name, mechanism and iteration count only. cmd/strata only
// parses flags and calls it.
package access
