"""Sources kept in step with where documents live (issue #30): a Git
repository or a folder on the server, synced on a schedule or on demand.

`origins`: listing and reading the files of each kind of origin (no database);
`runs`: one run, the differences applied as uploads are, with its log;
`schedule`: the runs that are due, queued by the workers.
"""
