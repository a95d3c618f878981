module github.com/summerwind/h2spec

go 1.12

require (
	github.com/fatih/color v0.0.0-20161025120501-bf82308e8c85
	github.com/inconshreveable/mousetrap v1.0.0 // indirect
	github.com/mattn/go-colorable v0.1.0 // indirect
	github.com/mattn/go-isatty v0.0.4 // indirect
	github.com/spf13/cobra v0.0.0-20170118185516-dc208f4211e7
	github.com/spf13/pflag v1.0.3 // indirect
	golang.org/x/net v0.0.0-20161104230106-55a3084c9119
	golang.org/x/sys v0.0.0-20190209173611-3b5209105503 // indirect
)
