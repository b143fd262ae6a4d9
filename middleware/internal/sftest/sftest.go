// Package sftest parses HTTP structured-field lists (RFC 9651) strictly, so
// tests can check that the rate-limit fields the middleware writes follow
// the grammar, not only that they look right.
package sftest

import (
	"errors"
	"fmt"
	"strconv"
)

// Item is one member of a list: a bare item and its parameters, in order.
type Item struct {
	Value  any // string (sf-string), Token, int64, or bool
	Params []Param
}

// Param is one parameter of an item.
type Param struct {
	Key   string
	Value any
}

// Token is an sf-token, told apart from an sf-string.
type Token string

// Param returns the value of the parameter key, or nil.
func (it Item) Param(key string) any {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Value
		}
	}
	return nil
}

// ParseList parses a field value as an sf-list of items (inner lists are
// refused: the rate-limit fields never use them).
func ParseList(s string) ([]Item, error) {
	p := &parser{s: s}
	p.skipSP()
	var items []Item
	for !p.done() {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		items = append(items, it)
		p.skipOWS()
		if p.done() {
			return items, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ','")
		}
		p.i++
		p.skipOWS()
		if p.done() {
			return nil, p.errorf("trailing ','")
		}
	}
	if len(items) == 0 {
		return nil, errors.New("sftest: empty list")
	}
	return items, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) done() bool { return p.i >= len(p.s) }

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("sftest: at %d of %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *parser) skipSP() {
	for !p.done() && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *parser) skipOWS() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) item() (Item, error) {
	v, err := p.bare()
	if err != nil {
		return Item{}, err
	}
	it := Item{Value: v}
	for !p.done() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return Item{}, err
		}
		var pv any = true
		if !p.done() && p.s[p.i] == '=' {
			p.i++
			if pv, err = p.bare(); err != nil {
				return Item{}, err
			}
		}
		it.Params = append(it.Params, Param{Key: key, Value: pv})
	}
	return it, nil
}

func (p *parser) key() (string, error) {
	start := p.i
	if p.done() || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return "", p.errorf("bad key start")
	}
	for !p.done() {
		c := p.s[p.i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], nil
}

func (p *parser) bare() (any, error) {
	if p.done() {
		return nil, p.errorf("missing value")
	}
	c := p.s[p.i]
	switch {
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.integer()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, p.errorf("bad boolean")
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		start := p.i
		for !p.done() && isTokenChar(p.s[p.i]) {
			p.i++
		}
		return Token(p.s[start:p.i]), nil
	}
	return nil, p.errorf("unexpected %q", c)
}

func isTokenChar(c byte) bool {
	if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}

func (p *parser) str() (string, error) {
	p.i++ // opening quote
	var out []byte
	for !p.done() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.done() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", p.errorf("bad escape")
			}
			out = append(out, p.s[p.i])
			p.i++
		case c == '"':
			return string(out), nil
		case c < 0x20 || c > 0x7e:
			return "", p.errorf("byte %#x not allowed in a string", c)
		default:
			out = append(out, c)
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *parser) integer() (int64, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := 0
	for !p.done() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
		digits++
	}
	if digits == 0 || digits > 15 {
		return 0, p.errorf("integer must have 1 to 15 digits")
	}
	if !p.done() && p.s[p.i] == '.' {
		return 0, p.errorf("decimals are not expected here")
	}
	return strconv.ParseInt(p.s[start:p.i], 10, 64)
}
