package console

import "net/url"

// offsetPager is where a list page paged by offset (licenses, releases) stands in its
// list; the "offset_pager" partial draws it. Every page link keeps the list's filters.
type offsetPager struct {
	Path  string     // the list page's own path
	Query url.Values // its filters
	Noun  string     // what the list counts, plural: "licenses"
	Total int
	Page  int
	Pages int
	// First and Last number the rows shown (1-based); 0 when none are.
	First, Last int
	// PastEnd: the page asked for is after the last one (an old link, a list that
	// shrank). The page then says so and links to the last page, rather than
	// counting "page 9 of 2" with a Previous link to another empty page.
	PastEnd bool
}

// newOffsetPager places page (1-based) of a list of total rows, of which shown are on it.
func newOffsetPager(path, noun string, query url.Values, page, total, shown int) offsetPager {
	p := offsetPager{Path: path, Query: query, Noun: noun, Total: total, Page: page,
		Pages: max(1, (total+pageSize-1)/pageSize)}
	p.PastEnd = total > 0 && page > p.Pages
	if shown > 0 {
		p.First = (page-1)*pageSize + 1
		p.Last = p.First + shown - 1
	}
	return p
}
