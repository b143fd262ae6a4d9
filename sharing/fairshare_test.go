package sharing

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

func TestFairSharesTable(t *testing.T) {
	cases := []struct {
		name       string
		partitions int
		demands    map[string]uint32
		want       map[string]int
	}{
		{"none", 20, nil, map[string]int{}},
		{"alone gets what it asks", 20, map[string]uint32{"a": 7}, map[string]int{"a": 7}},
		{"alone capped at partitions", 20, map[string]uint32{"a": 50}, map[string]int{"a": 20}},
		{"equal, divides", 20, map[string]uint32{"a": 20, "b": 20, "c": 20, "d": 20},
			map[string]int{"a": 5, "b": 5, "c": 5, "d": 5}},
		{"equal, leftovers in owner order", 20, map[string]uint32{"c": 20, "a": 20, "b": 20},
			map[string]int{"a": 7, "b": 7, "c": 6}},
		{"unequal, max-min", 20, map[string]uint32{"a": 2, "b": 10, "c": 20},
			map[string]int{"a": 2, "b": 9, "c": 9}},
		{"unequal, all satisfied", 20, map[string]uint32{"a": 2, "b": 10, "c": 3},
			map[string]int{"a": 2, "b": 10, "c": 3}},
		{"small demand frees share twice", 10, map[string]uint32{"a": 1, "b": 2, "c": 100, "d": 100},
			map[string]int{"a": 1, "b": 2, "c": 4, "d": 3}},
		{"more owners than partitions", 2, map[string]uint32{"d": 1, "c": 1, "b": 5, "a": 9},
			map[string]int{"a": 1, "b": 1}},
		{"zero demand gets nothing", 4, map[string]uint32{"a": 0, "b": 4}, map[string]int{"b": 4}},
		{"no partitions", 0, map[string]uint32{"a": 3}, map[string]int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, _ := fairShares(c.partitions, c.demands, 0)
			// Zero entries are as good as absent.
			for o, s := range got {
				if s == 0 {
					delete(got, o)
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("fairShares(%d, %v) = %v, want %v", c.partitions, c.demands, got, c.want)
			}
		})
	}
}

// TestFairSharesProperties checks the max-min properties on random inputs:
// nobody gets more than it asks, no partition is handed out twice, no
// partition is left over while someone wants more, and an owner that wants
// more than it got has at least as much as anyone else minus one.
func TestFairSharesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 2000; n++ {
		partitions := rng.IntN(40)
		demands := map[string]uint32{}
		for i := rng.IntN(8); i > 0; i-- {
			demands[string(rune('a'+rng.IntN(12)))] = uint32(rng.IntN(30))
		}
		shares, _ := fairShares(partitions, demands, 0)
		total, want, most := 0, 0, 0
		for o, s := range shares {
			if s > int(demands[o]) {
				t.Fatalf("%v over %d: %s got %d, asked %d", demands, partitions, o, s, demands[o])
			}
			total += s
			most = max(most, s)
		}
		for _, d := range demands {
			want += int(d)
		}
		if total != min(partitions, want) {
			t.Fatalf("%v over %d: handed out %d, want %d", demands, partitions, total, min(partitions, want))
		}
		for o, d := range demands {
			if shares[o] < int(d) && shares[o] < most-1 {
				t.Fatalf("%v over %d: %s got %d while wanting %d and another got %d", demands, partitions, o, shares[o], d, most)
			}
		}
	}
}

func TestHomeRangesAreDisjoint(t *testing.T) {
	shares, _ := fairShares(20, map[string]uint32{"c": 20, "a": 20, "b": 3}, 0)
	type rng struct{ lo, hi int }
	got := map[string]rng{}
	for o := range shares {
		lo, hi := homeRange(o, shares)
		got[o] = rng{lo, hi}
	}
	want := map[string]rng{"a": {0, 9}, "b": {9, 12}, "c": {12, 20}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("home ranges = %v, want %v (shares %v)", got, want, shares)
	}
	if lo, hi := homeRange("z", shares); lo != hi {
		t.Fatalf("an owner without a share got home range [%d, %d)", lo, hi)
	}
}

func TestAcquireAndReleaseOrder(t *testing.T) {
	free := []int{0, 1, 2, 3, 4, 5, 6, 7}
	order := acquireOrder("owner-x", free, 3, 6)
	first := append([]int(nil), order[:3]...)
	sort.Ints(first)
	if !reflect.DeepEqual(first, []int{3, 4, 5}) {
		t.Fatalf("acquireOrder tries %v first, want the home range 3..5", order[:3])
	}
	rest := order[3:]
	for i := 1; i < len(rest); i++ {
		if preference("owner-x", rest[i-1]) < preference("owner-x", rest[i]) {
			t.Fatalf("acquireOrder outside home %v is not by descending preference", rest)
		}
	}
	rel := releaseOrder("owner-x", free, 3, 6)
	last := append([]int(nil), rel[5:]...)
	sort.Ints(last)
	if !reflect.DeepEqual(last, []int{3, 4, 5}) {
		t.Fatalf("releaseOrder gives up home partitions before others: %v", rel)
	}
	// Different owners prefer different partitions outside home.
	a := acquireOrder("owner-a", free, 0, 0)
	b := acquireOrder("owner-b", free, 0, 0)
	if reflect.DeepEqual(a, b) {
		t.Fatalf("two owners share the preference order %v", a)
	}
}

// TestSplitJain checks the index of a few splits against sums done by hand.
func TestSplitJain(t *testing.T) {
	for _, c := range []struct {
		a, r, s int
		want    float64
	}{
		{16, 4, 31, 250000.0 / (16 * (12*961 + 4*1024))},
		{16, 4, 1, 400.0 / (16 * (12 + 4*4))},
		{128, 116, 3, 250000.0 / (128 * (12*9 + 116*16))},
		{4, 0, 25, 1},
	} {
		if got := splitJain(c.a, c.r, c.s); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("splitJain(%d, %d, %d) = %v, want %v", c.a, c.r, c.s, got, c.want)
		}
	}
}
