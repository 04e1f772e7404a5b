-- MySQL dump 10.19  Distrib 10.3.38-MariaDB, for debian-linux-gnu (x86_64)
--
-- Host: db1163    Database: dewiki
-- ------------------------------------------------------

DROP TABLE IF EXISTS `langlinks`;
/*!40101 SET @saved_cs_client     = @@character_set_client */;
/*!40101 SET character_set_client = utf8 */;
CREATE TABLE `langlinks` (
  `ll_from` int(8) unsigned NOT NULL DEFAULT 0,
  `ll_lang` varbinary(35) NOT NULL DEFAULT '',
  `ll_title` varbinary(255) NOT NULL DEFAULT '',
  PRIMARY KEY (`ll_from`,`ll_lang`),
  KEY `ll_lang` (`ll_lang`,`ll_title`)
) ENGINE=InnoDB DEFAULT CHARSET=binary;
/*!40101 SET character_set_client = @saved_cs_client */;

--
-- Dumping data for table `langlinks`
--

/*!40000 ALTER TABLE `langlinks` DISABLE KEYS */;
INSERT INTO `langlinks` VALUES (100,'en','Anarchism'),(101,'en','Autism'),(106,'bg','Григориански_календар'),(107,'en','Achilles');
/*!40000 ALTER TABLE `langlinks` ENABLE KEYS */;

-- Dump completed on 2024-06-01  3:01:44
