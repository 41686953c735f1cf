// Package acl decides whether a principal may perform an operation on a
// resource of a broker. It is pure: the broker
// feeds it the rules it mirrors from metad and the principal it
// authenticated, and gets a Decision; no I/O, no clock.
//
// # Principals
//
// A principal is "User:NAME" (NAME: the CN of a user or admin client
// certificate, or a user name checked against its password). In a rule
// "User:*" stands for every user. Principals named super-users (broker
// --super-users, and every admin certificate) pass every check but one.
//
// # Rules
//
// A Rule allows or denies one operation (read, write, create, delete,
// alter, describe, or all) to one principal on topics, groups or the
// cluster, named literally (the name "*" matches every name) or by a
// prefix. Evaluation, in order:
//
//   - AC1 Internal topics (names starting with "__") are never written,
//     created or deleted by a client, super-user or not: only brokers
//     (which the broker does not pass through this package) write them.
//   - AC2 A super-user is allowed.
//   - AC3 A matching deny rule refuses, whatever allows: deny overrides
//     allow.
//   - AC4 A matching allow rule allows. An allow of read, write, delete or
//     alter also allows describe on the same resource (as Kafka does), so
//     a producer needs no separate describe rule to find partitions.
//   - AC5 Nothing matches: refused (there is no "allow if no ACL").
//
// A rule matches a request when its principal is the request's or
// "User:*", its resource type is the request's, its name matches (literal:
// equal, or "*"; prefixed: the request's name starts with it) and its
// operation is the request's or all (or, for allows, AC4).
//
// # Storage in metad
//
// Rules live under ACLsPrefix, one key per rule: ACLsPrefix +
// Rule.ID(), the value the rule as JSON (the fields of Rule, lower-case
// names). The key is a function of every field, so adding a rule twice
// writes one key and removing names it exactly. User credentials live
// under UsersPrefix + NAME (package internal/scram describes the value).
package acl
