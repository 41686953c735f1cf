package objfault

import (
	"net/url"
	"testing"
)

func TestRuleMatches(t *testing.T) {
	q := func(s string) url.Values {
		v, err := url.ParseQuery(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		rule   Rule
		method string
		key    string
		query  string
		want   bool
	}{
		{Rule{}, "GET", "a", "", true},
		{Rule{Method: "put"}, "PUT", "a", "", true},
		{Rule{Method: "PUT"}, "GET", "a", "", false},
		{Rule{KeyContains: "/3/"}, "GET", "t/x/3/seg", "", true},
		{Rule{KeyContains: "/3/"}, "GET", "t/x/4/seg", "", false},
		{Rule{Query: []string{"uploadId"}}, "POST", "k", "uploadId=abc", true},
		{Rule{Query: []string{"uploadId"}}, "POST", "k", "uploads=", false},
		{Rule{Query: []string{"partNumber=2", "uploadId"}}, "PUT", "k", "partNumber=2&uploadId=x", true},
		{Rule{Query: []string{"partNumber=2"}}, "PUT", "k", "partNumber=3&uploadId=x", false},
		{Rule{Query: []string{"delete"}}, "POST", "", "delete=", true},
	} {
		if got := tc.rule.matches(tc.method, tc.key, q(tc.query)); got != tc.want {
			t.Errorf("%+v matches %s %s?%s = %v, want %v", tc.rule, tc.method, tc.key, tc.query, got, tc.want)
		}
	}
}

func TestObjectKey(t *testing.T) {
	for path, want := range map[string]string{
		"/bucket/a/b/c": "a/b/c", "/bucket/": "", "/bucket": "", "/": "", "/bucket/k": "k",
	} {
		if got := objectKey(path); got != want {
			t.Errorf("objectKey(%q) = %q, want %q", path, got, want)
		}
	}
}
