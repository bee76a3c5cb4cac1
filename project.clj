;; The topology jar of `sparse submit` / `sparse run`, built by Debian's leiningen
;; package (apt-get install leiningen) from Maven Central alone: Clojars is not
;; needed. storm-core 2.x pulls carbonite from Clojars (through storm-clojure);
;; the managed exclusion drops it without changing the `lein deps :tree` line
;; `sparse run` reads the Storm version from. nrepl (lein's REPL) comes from the
;; Debian package's repository. Flux is not in the jar: its parent POM is not
;; on Maven Central; the `storm` command adds STORM_HOME/external/flux instead.
;; Without leiningen: `mvn -q -f jvm/topology/pom.xml package`, then
;; `sparse submit -j _build/sr3-topologies.jar ...`.
(defproject sr3-topologies "0.0.1-SNAPSHOT"
  :resource-paths ["_resources"]
  :target-path "_build"
  :min-lein-version "2.0.0"
  :jvm-opts ["-client"]
  :repositories ^:replace [["central" {:url "https://repo1.maven.org/maven2/" :snapshots false}]
                           ["debian" {:url "file:///usr/share/maven-repo" :snapshots false
                                      :checksum :ignore}]]
  :managed-dependencies [[org.apache.storm/storm-clojure "2.8.3"
                          :exclusions [org.clojars.bipinprasad/carbonite]]]
  :dependencies [[org.apache.storm/storm-core "2.8.3"]]
  :jar-exclusions     [#"log4j\.properties" #"org\.apache\.storm\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\.yaml"]
  :uberjar-exclusions [#"log4j\.properties" #"org\.apache\.storm\.(?!flux)" #"trident" #"META-INF" #"meta-inf" #"\.yaml"]
  )
