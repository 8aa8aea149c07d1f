"""The camera view checks' labelled test set, its report (``campusguard viewcheck-report``) and benchmark."""
