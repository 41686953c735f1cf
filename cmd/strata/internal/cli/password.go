package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// EnvPassword holds the password of --user when --password-file is not
// given.
const EnvPassword = "STRATA_PASSWORD"

// ResolvePassword returns the password of a --user login: the first line
// of passwordFile when given (its trailing newline dropped), else env
// (the value of $STRATA_PASSWORD). An empty password is an error.
func ResolvePassword(passwordFile, env string) (string, error) {
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return "", fmt.Errorf("--password-file: %w", err)
		}
		p, _, _ := strings.Cut(string(b), "\n")
		p = strings.TrimSuffix(p, "\r")
		if p == "" {
			return "", fmt.Errorf("--password-file %s: empty password", passwordFile)
		}
		return p, nil
	}
	if env == "" {
		return "", errors.New("--user needs a password: set $" + EnvPassword + " or --password-file")
	}
	return env, nil
}

// ReadPassword reads a password from the first line of text (as
// `strata user create --password-stdin` gets it).
func ReadPassword(text string) (string, error) {
	p, _, _ := strings.Cut(text, "\n")
	p = strings.TrimSuffix(p, "\r")
	if p == "" {
		return "", errors.New("empty password on standard input")
	}
	return p, nil
}
