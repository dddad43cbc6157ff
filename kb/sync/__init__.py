"""Sources kept in step with where documents live (issue #30): a Git
repository, a folder on the server or a website, synced on a schedule or on
demand.

`origins`: listing and reading the files of a folder or a Git repository (no
database); `web`: a website's pages (robots.txt, sitemaps, conditional GETs,
addresses checked after DNS and every redirect);
`runs`: one run, the differences applied as uploads are, with its log;
`schedule`: the runs that are due, queued by the workers.
"""
