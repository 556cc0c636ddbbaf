package input

import (
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// The field rules of a request message: every string field names something (a key, an
// id, a version, an email) and is an Identifier, but for these.
var (
	// freeTextFields may hold line breaks and tabs (Text).
	freeTextFields = map[protoreflect.Name]bool{"notes": true, "release_notes": true, "password": true}
	// trimmedFields are compared by the services after trimming their surrounding white
	// space (api.md: check-update's product_id, whitespace-insensitively), so white space
	// at their ends is not refused (TrimmedIdentifier).
	trimmedFields = map[protoreflect.Name]bool{"product_id": true}
)

// FieldCheck is the check the policy applies to a request's string field of that name.
func FieldCheck(name protoreflect.Name) func(string) Problem {
	switch {
	case freeTextFields[name]:
		return Text
	case trimmedFields[name]:
		return TrimmedIdentifier
	}
	return Identifier
}

// CheckMessage applies the input policy to every string field of a request message, in
// nested messages and lists of them too (not in maps, nor in the free-form
// google.protobuf types, whose strings the decoders check for UTF-8 only). It is the one
// check of both doors: the REST edge's decoder and the services' gRPC servers, so a value
// one refuses the other refuses with the same words. The first refused field, in the
// order the message declares its fields, is named in the *Error.
//
// The walk follows a plan made once per message type (the string and message fields and
// their checks), so a call costs a read of each such field and nothing else.
func CheckMessage(m protoreflect.Message) error {
	return planOf(m.Descriptor()).check(m)
}

// messagePlan is what CheckMessage reads in one message type.
type messagePlan struct {
	steps []planStep
}

// planStep is one field to read: a string field with its check, or a message field with
// the plan of its type.
type planStep struct {
	fd    protoreflect.FieldDescriptor
	check func(string) Problem
	inner *messagePlan
}

// plans holds each message type's plan, by descriptor: a generated type has one, so the
// lookup hashes a pointer, not the type's name.
var plans sync.Map // protoreflect.MessageDescriptor → *messagePlan

func planOf(md protoreflect.MessageDescriptor) *messagePlan {
	if p, ok := plans.Load(md); ok {
		return p.(*messagePlan)
	}
	p := buildPlan(md, map[protoreflect.FullName]*messagePlan{})
	plans.Store(md, p)
	return p
}

// buildPlan makes md's plan; building holds the plans under construction, so that a
// message type that contains itself refers to its own plan.
func buildPlan(md protoreflect.MessageDescriptor, building map[protoreflect.FullName]*messagePlan) *messagePlan {
	if p, ok := building[md.FullName()]; ok {
		return p
	}
	p := &messagePlan{}
	building[md.FullName()] = p
	if md.FullName().Parent() == "google.protobuf" {
		return p // Value, Struct, Timestamp, the wrappers: their own rules
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsMap():
		case fd.Kind() == protoreflect.StringKind:
			p.steps = append(p.steps, planStep{fd: fd, check: FieldCheck(fd.Name())})
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			p.steps = append(p.steps, planStep{fd: fd, inner: buildPlan(fd.Message(), building)})
		}
	}
	return p
}

func (p *messagePlan) check(m protoreflect.Message) error {
	for i := range p.steps {
		s := &p.steps[i]
		if s.inner != nil && len(s.inner.steps) == 0 {
			continue // nothing to check in that type
		}
		if s.fd.IsList() {
			if !m.Has(s.fd) {
				continue
			}
			list := m.Get(s.fd).List()
			for j := range list.Len() {
				if err := s.checkValue(list.Get(j)); err != nil {
					return err
				}
			}
			continue
		}
		if s.inner != nil && !m.Has(s.fd) {
			continue
		}
		if err := s.checkValue(m.Get(s.fd)); err != nil {
			return err
		}
	}
	return nil
}

func (s *planStep) checkValue(v protoreflect.Value) error {
	if s.inner != nil {
		return s.inner.check(v.Message())
	}
	if p := s.check(v.String()); p != OK {
		return &Error{Field: string(s.fd.Name()), Problem: p}
	}
	return nil
}
