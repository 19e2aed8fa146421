// The status page, live: one EventSource on /events. A "change" event
// fetches this page's main part again and puts it in place; a "heard"
// event carries, by node, how long ago each was heard, and the ages shown
// tick on from there. Without JavaScript the page is whole as served.
"use strict";
(function () {
	if (!window.EventSource || !window.fetch) {
		return;
	}
	var main = document.getElementById("main");
	var live = document.getElementById("live");
	var fetching = false, again = false;

	function ago(ms) {
		var s = Math.round(ms / 1000);
		if (s < 60) {
			return s + "s ago";
		}
		var m = Math.floor(s / 60);
		if (m < 60) {
			return m + "m" + (s % 60) + "s ago";
		}
		return Math.floor(m / 60) + "h" + (m % 60) + "m ago";
	}
	function stamp(root) {
		root.querySelectorAll("[data-age-ms]").forEach(function (el) {
			var age = Number(el.getAttribute("data-age-ms"));
			if (age >= 0) {
				el.heardAt = Date.now() - age;
			}
		});
	}
	function tick() {
		main.querySelectorAll("[data-age-ms]").forEach(function (el) {
			if (el.heardAt) {
				el.textContent = ago(Date.now() - el.heardAt);
			}
		});
	}
	function refresh() {
		if (fetching) {
			again = true;
			return;
		}
		fetching = true;
		fetch(location.pathname + location.search, {headers: {"X-Mesh-Fragment": "1"}, credentials: "same-origin", cache: "no-store"})
			.then(function (r) {
				if (!r.ok) {
					throw new Error("the page answered " + r.status);
				}
				return r.text();
			})
			.then(function (html) {
				main.innerHTML = html;
				stamp(main);
				tick();
				document.body.setAttribute("data-updates", String(Number(document.body.getAttribute("data-updates") || 0) + 1));
			})
			.catch(function () {
				live.hidden = true;
			})
			.then(function () {
				fetching = false;
				if (again) {
					again = false;
					refresh();
				}
			});
	}
	function heard(ev) {
		var ages = JSON.parse(ev.data);
		Object.keys(ages).forEach(function (node) {
			main.querySelectorAll("[data-node]").forEach(function (row) {
				if (row.getAttribute("data-node") !== node) {
					return;
				}
				row.querySelectorAll("[data-age-ms]").forEach(function (el) {
					el.heardAt = Date.now() - ages[node];
				});
			});
		});
		tick();
	}

	stamp(main);
	setInterval(tick, 1000);
	var es = new EventSource("/events?digest=" + encodeURIComponent(document.body.getAttribute("data-digest") || ""));
	es.addEventListener("open", function () {
		live.hidden = false;
	});
	es.addEventListener("error", function () {
		live.hidden = true;
	});
	es.addEventListener("change", refresh);
	es.addEventListener("heard", heard);
})();
