package metrics

import (
	"slices"
	"sync"
)

// regionSources is what a collector that reads its regions at scrape time
// (writes, yield) keeps: one source a region, replaced when a region is
// added again, safe for a scrape while regions are added.
type regionSources[S any] struct {
	mu sync.Mutex
	m  map[string]S
}

func (r *regionSources[S]) add(region string, src S) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]S{}
	}
	r.m[region] = src
}

// each calls f for every region and its source in region order, without
// holding the lock, so a slow source does not hold up an add.
func (r *regionSources[S]) each(f func(region string, src S)) {
	r.mu.Lock()
	regions := make([]string, 0, len(r.m))
	for region := range r.m {
		regions = append(regions, region)
	}
	sources := make(map[string]S, len(r.m))
	for region, src := range r.m {
		sources[region] = src
	}
	r.mu.Unlock()
	slices.Sort(regions)
	for _, region := range regions {
		f(region, sources[region])
	}
}
