package group

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// KIP-848 subscriptions by regular expression (Kafka's
// SubscribedTopicRegex): resolved by the coordinator against the topics
// that exist (TopicSource.TopicNames) when a member subscribes with a new
// regex, at Load, and every RegexRefreshInterval by Tick, so a topic
// created or deleted changes what members subscribe to.

// compileRegex compiles a subscription regex. Kafka matches it against
// whole topic names (RE2/J); Go's regexp is RE2.
func compileRegex(pattern string) (*regexp.Regexp, error) {
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		return nil, fmt.Errorf("%w (%w): subscribed_topic_regex %q: %v", ErrInvalidRegularExpression, ErrInvalid, pattern, err)
	}
	return re, nil
}

// matchTopics returns the topics of names pattern matches, sorted.
func matchTopics(re *regexp.Regexp, names []string) []string {
	var out []string
	for _, n := range names {
		if re.MatchString(n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// refreshRegexes re-resolves every subscribed regex against names (the
// topics that exist now), and starts a new epoch when what a member
// subscribes to changed; counts holds the partition counts of (at least)
// the topics newly matched.
func (g *consumerGroup) refreshRegexes(names []string, counts map[string]int32, now time.Time) {
	if g.resolve(names, now) {
		g.bump(counts, now)
	}
}

// resolve resolves every subscribed regex against names and updates what
// the members subscribe to; it reports whether that changed.
func (g *consumerGroup) resolve(names []string, now time.Time) (changed bool) {
	matches := map[string][]string{}
	for _, r := range g.regexes() {
		re := g.compiled[r]
		if re == nil {
			var err error
			if re, err = compileRegex(r); err != nil {
				continue // accepted once, so it compiles
			}
			g.compiled[r] = re
		}
		matches[r] = matchTopics(re, names)
	}
	for r := range g.compiled {
		if _, used := matches[r]; !used {
			delete(g.compiled, r)
		}
	}
	g.matches, g.resolvedAt = matches, now
	for _, m := range g.members {
		if s := union(m.names, matches[m.regex]); !slices.Equal(s, m.subscribed) {
			m.subscribed = s
			changed = true
		}
	}
	return changed
}
