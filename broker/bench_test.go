package broker_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/mesh-fleet/mesh/broker"
)

// BenchmarkSetUsers replaces a running bus's users as a join does: the same
// N users (a node's lists of subjects each) and one more, then without it.
// Its ns/op is what each token create, enrolment and used token costs the
// controller's bus.
func BenchmarkSetUsers(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			users := make([]broker.User, n)
			for i := range users {
				_, pub := newUser(b)
				node := fmt.Sprintf("n%05d", i)
				users[i] = broker.User{
					NKey:      pub,
					Publish:   []string{"mesh.node." + node + ".>", "$JS.ACK.DECLARATIONS." + node + ".>", "_INBOX." + node + ".>"},
					Subscribe: []string{"_DELIVER.DECLARATIONS." + node, "_INBOX." + node + ".>"},
				}
			}
			_, extra := newUser(b)
			more := append(users[:n:n], broker.User{NKey: extra, Publish: []string{"mesh.enrol"}, Subscribe: []string{"_INBOX.t.>"}})
			bus := startBus(b, users)
			for i := 0; b.Loop(); i++ {
				next := users
				if i%2 == 0 {
					next = more
				}
				if err := bus.srv.SetUsers(next); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAddUser changes the same running bus's users one at a time, as
// a join now does: one user added, then withdrawn. Its ns/op should not
// grow with N, where BenchmarkSetUsers's does.
func BenchmarkAddUser(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			users := make([]broker.User, n)
			for i := range users {
				_, pub := newUser(b)
				node := fmt.Sprintf("n%05d", i)
				users[i] = broker.User{
					NKey:      pub,
					Publish:   []string{"mesh.node." + node + ".>", "$JS.ACK.DECLARATIONS." + node + ".>", "_INBOX." + node + ".>"},
					Subscribe: []string{"_DELIVER.DECLARATIONS." + node, "_INBOX." + node + ".>"},
				}
			}
			_, extra := newUser(b)
			bus := startBus(b, users)
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					if err := bus.srv.AddUser(broker.User{NKey: extra, Publish: []string{"mesh.enrol"}, Subscribe: []string{"_INBOX.t.>"}}); err != nil {
						b.Fatal(err)
					}
				} else {
					bus.srv.WithdrawUser(extra)
				}
			}
		})
	}
}
