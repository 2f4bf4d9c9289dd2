package visibility

import (
	"testing"

	"github.com/aspd/aspd/protocol"
)

func TestVisible(t *testing.T) {
	const me = "@acme.support"
	tests := []struct {
		name string
		v    View
		m    Meta
		want bool
	}{
		{"joined sees a message", View{me, "joined", Joined}, Meta{Sequence: 9, Type: protocol.EventMessage}, true},
		{"invitee does not see a message", View{me, "invited", 0}, Meta{Sequence: 1, Type: protocol.EventMessage}, false},
		{"invitee sees its own invitation", View{me, "invited", 0}, Meta{Sequence: 2, Type: protocol.EventInvited, Subject: me}, true},
		{"invitee does not see another's invitation", View{me, "invited", 0}, Meta{Sequence: 3, Type: protocol.EventInvited, Subject: "@acme.engineer"}, false},
		{"invitee sees ended when in its audience", View{me, "left", 0}, Meta{Sequence: 4, Type: protocol.EventEnded, Audience: []string{"@x.y", me}}, true},
		{"invitee does not see ended outside its audience", View{me, "left", 0}, Meta{Sequence: 4, Type: protocol.EventEnded}, false},
		{"left sees up to its own left", View{me, "left", 7}, Meta{Sequence: 7, Type: protocol.EventLeft, Subject: me}, true},
		{"left sees nothing after its left", View{me, "left", 7}, Meta{Sequence: 8, Type: protocol.EventMessage}, false},
		{"block-silenced left does not see its own left", View{me, "left", 6}, Meta{Sequence: 7, Type: protocol.EventLeft, Subject: me}, false},
		{"re-invited prior participant sees reopened", View{me, "invited", 10}, Meta{Sequence: 11, Type: protocol.EventReopened, Audience: []string{me}}, true},
		{"prior participant not re-invited does not see reopened", View{me, "left", 10}, Meta{Sequence: 11, Type: protocol.EventReopened}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Visible(tt.v, tt.m); got != tt.want {
				t.Errorf("Visible = %v, want %v", got, tt.want)
			}
		})
	}
}
